//! `grantctl`: the operator's command.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use ledger::PgStore;
use ops::pgcluster::{self, Durability};

mod cli;
use cli::{
    AgentCmd, AuditCmd, Cli, Cmd, CredentialsCmd, DbCmd, DemoCmd, McpCmd, OwnerTokenCmd, OwnersCmd, ProfilesCmd,
    ProjectionsCmd, ServeCmd, SettingsCmd, TicketsCmd, TlsCmd,
};

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
            let config = ops::serve::AuthorizerConfig::parse(ops::settings::env, insecure_loopback)?;
            let url = database_url(&cli.database_url)?;
            ops::serve::authorizer(config, url).await?;
        }
        Cmd::Serve { service: ServeCmd::Runtime { insecure_loopback } } => {
            let config = ops::serve::RuntimeServeConfig::parse(ops::settings::env, insecure_loopback)?;
            let url = database_url(&cli.database_url)?;
            ops::serve::runtime(config, url).await?;
        }
        Cmd::Serve { service: ServeCmd::Checkpoints { key, every_events, every_seconds, file } } => {
            let url = database_url(&cli.database_url)?;
            ops::migrate::run(&mut ops::connect(&url).await?).await?;
            let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
            let store =
                PgStore::with_listener(ledger::postgres::pool(config.clone(), 2).map_err(anyhow::Error::msg)?, config);
            let signing = ops::proof::Signing {
                key: ops::proof::load_signer(&key)?,
                every_events: every_events.max(1),
                every: Duration::from_secs(every_seconds),
                file,
            };
            let listen =
                telemetry::MetricsListen::parse(ops::settings::env, "CHECKPOINTS", ops::observe::CHECKPOINTS_METRICS)?;
            let metrics = ops::proof::ProofMetrics::default();
            let mut registry = telemetry::Registry::default();
            metrics.register(&mut registry);
            let health = ops::observe::database_health(store.pool().clone());
            ops::observe::serve_metrics(listen, "checkpoint service", registry, health).await?;
            tracing::info!(origin = signing.key.name, "checkpoint service started");
            ops::proof::serve(store, signing, metrics, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        }
        Cmd::Serve { service: ServeCmd::Mcp { insecure_loopback } } => {
            let config = ops::serve::McpConfig::parse(ops::settings::env, insecure_loopback)?;
            ops::serve::mcp(config).await?;
        }
        Cmd::Mcp { command: McpCmd::Stdio } => ops::serve::mcp_stdio(ops::settings::env).await?,
        Cmd::Serve { service: ServeCmd::Gateway { insecure_loopback } } => {
            let config = ops::serve::GatewayConfig::parse(ops::settings::env, insecure_loopback)?;
            let url = database_url(&cli.database_url)?;
            ops::serve::gateway(config, url).await?;
        }
        Cmd::Owners { command } => owners_command(&database_url(&cli.database_url)?, command).await?,
        Cmd::Demo { command: DemoCmd::Site { dir } } => ops::demo::site(&dir).await?,
        Cmd::Demo { command: DemoCmd::Run { owner } } => {
            println!("{}", ops::demo::run(&owner, ops::settings::env).await?);
        }
        Cmd::Agent { command: AgentCmd::Run { task, script, provider, model_url, model, trace } } => {
            let model = model.map(|name| ops::agent::ModelChoice { provider, base_url: model_url, name });
            let outcome =
                ops::agent::run(&task, script.as_deref(), model, trace.as_deref(), ops::settings::env).await?;
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
            let wanted = ops::serve::DeploymentSettings::parse(ops::settings::env)?;
            let url = database_url(&cli.database_url)?;
            let recorded = ops::serve::apply_settings(&url, &tenant, wanted).await?;
            if recorded.is_empty() {
                println!("tenant {tenant}: the settings in force are these already; nothing recorded");
            } else {
                println!("tenant {tenant}: recorded {}", recorded.join(", "));
            }
        }
        Cmd::Settings { command: SettingsCmd::Show { tenant } } => {
            println!("{}", ops::serve::show_settings(&database_url(&cli.database_url)?, &tenant).await?);
        }
        Cmd::Serve { service: ServeCmd::Worker } => {
            let config = ops::worker::WorkerConfig::parse(ops::settings::env)?;
            ops::worker::serve(config, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        }
        Cmd::Serve { service: ServeCmd::Projections } => {
            let url = database_url(&cli.database_url)?;
            ops::migrate::run(&mut ops::connect(&url).await?).await?;
            let metrics =
                telemetry::MetricsListen::parse(ops::settings::env, "PROJECTIONS", ops::observe::PROJECTIONS_METRICS)?;
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
        Cmd::Audit { command } => match offline(command) {
            Ok(done) => done?,
            Err(command) => audit(&database_url(&cli.database_url)?, command).await?,
        },
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
            for (profile, sessions) in ops::authority::unclaimed_profiles(&client, &tenant).await? {
                println!("{profile}\t{}", if sessions.is_empty() { "-".into() } else { sessions.join(",") });
            }
        }
        Cmd::Credentials { command } => credentials_command(&database_url(&cli.database_url)?, command).await?,
        Cmd::Status => {
            let url = database_url(&cli.database_url)?;
            let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
            let services = ops::status::services(ops::settings::env);
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
    }
    Ok(())
}

/// The audit commands that need no database: an auditor runs them with the files and keys alone.
/// Any other command is handed back.
fn offline(command: AuditCmd) -> std::result::Result<Result<()>, AuditCmd> {
    Ok(match command {
        AuditCmd::Verify { export: Some(path), public_key: Some(key), witness_key, checkpoints } => {
            ops::proof::Trust::load(&key, &witness_key).and_then(|trust| {
                println!("{}", ops::proof::verify_export_offline(&path, &trust, checkpoints.as_deref())?);
                Ok(())
            })
        }
        AuditCmd::Keygen { name, out } => ops::proof::keygen(&name, &out).map(|public| {
            println!("{public}");
            eprintln!("private key in {}; give auditors the public key above", out.display());
        }),
        AuditCmd::Cosign { public_key, key, checkpoints, out } => (|| {
            let log_key = ops::proof::load_verifier(&public_key)?;
            let witness = ops::proof::load_signer(&key)?;
            let n = ops::proof::cosign_file(&checkpoints, &log_key, &witness, &out)?;
            println!("{n} checkpoints checked and cosigned by {} into {}", witness.name, out.display());
            Ok(())
        })(),
        other => return Err(other),
    })
}

/// `--since`: an RFC 3339 time.
fn since_arg(since: Option<String>) -> Result<Option<time::OffsetDateTime>> {
    since
        .map(|t| {
            time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339)
                .with_context(|| format!("--since {t:?} is not an RFC 3339 time"))
        })
        .transpose()
}

/// `grantctl audit …`.
async fn audit(url: &str, command: AuditCmd) -> Result<()> {
    let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
    match command {
        AuditCmd::Replay { tenant, session, grant, since, format } => {
            let since = since_arg(since)?;
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let filter = ops::audit::Filter { tenant, session, grant, since };
            let rows = ops::audit::replay(&store, &filter).await?;
            ops::audit::print(&rows, format == "jsonl", std::io::stdout().lock())?;
        }
        AuditCmd::Verify { export: None, public_key: Some(key), witness_key, checkpoints } => {
            let trust = ops::proof::Trust::load(&key, &witness_key)?;
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            println!("{}", ops::proof::verify_log(&store, &trust, checkpoints.as_deref()).await?);
        }
        AuditCmd::Verify { export: Some(path), .. } => {
            // Without a public key: the export against its manifest and against this database.
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            println!("{}", ops::audit::verify_export(&store, &path).await?);
        }
        AuditCmd::Verify { export: None, public_key: None, .. } => {
            println!("{}", ops::check::run(&config, ledger::READ_PAGE).await?);
            println!("{}", ops::audit::projections_verify(&config, None).await?);
        }
        AuditCmd::Export { tenant, out } => {
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let filter = ops::audit::Filter { tenant, ..ops::audit::Filter::default() };
            let (m, events) = ops::proof::export(&store, filter.tenant.as_deref(), &out).await?;
            let evidence = ops::proof::evidence_path(&out);
            println!("{}: {events} events with the checkpoints and proofs that sign them", evidence.display());
            println!("{}: {} rows, {}, sha256 {}", out.display(), m.count, ops::audit::span(&m), m.sha256);
        }
        AuditCmd::Checkpoint { key, file } => {
            ops::migrate::run(&mut ops::connect(url).await?).await?;
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let signing = ops::proof::Signing {
                key: ops::proof::load_signer(&key)?,
                every_events: 1,
                every: Duration::ZERO,
                file,
            };
            match ops::proof::checkpoint(&store, &signing, |last, size| size > last || size == 0).await? {
                Some(c) => print!("{}", c.note),
                None => println!("the newest checkpoint already covers the whole log"),
            }
        }
        AuditCmd::Rotate { old_key, new_key, file } => {
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let (old, new) = (ops::proof::load_signer(&old_key)?, ops::proof::load_signer(&new_key)?);
            print!("{}", ops::proof::rotate(&store, &old, &new, file.as_deref()).await?);
        }
        AuditCmd::Rejudge { policy, since, tenant, format } => {
            let bytes = std::fs::read(&policy).with_context(|| format!("reading {}", policy.display()))?;
            let policy = authorizer::policy::Policy::parse(&bytes)?;
            let since = since_arg(since)?;
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let report = ops::rejudge::run(&store, &policy, &ops::rejudge::Scope { tenant, since }).await?;
            ops::rejudge::print(&report, &policy, format == "jsonl", std::io::stdout().lock())?;
        }
        AuditCmd::Keygen { .. } | AuditCmd::Cosign { .. } => bail!("this command needs no database"),
        AuditCmd::Prove { event, from, to } => {
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let proof = match (event, from, to) {
                (Some(id), _, _) => ops::proof::prove_event(&store, id).await?,
                (None, Some(a), Some(b)) => ops::proof::prove_consistency(&store, a, b).await?,
                _ => bail!("--event, or --from and --to"),
            };
            println!("{}", serde_json::to_string_pretty(&proof)?);
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
        OwnersCmd::Link { tenant, token, base, session } => {
            if let Some(s) = &session {
                ledger::check_entity_id("session", s).map_err(|e| anyhow::anyhow!("--session: {}", e.reason))?;
            }
            // The id with its tenant, or the token itself, whose owner names both.
            let (tenant, token_id) = match uuid::Uuid::parse_str(&token) {
                Ok(id) => (tenant.context("--tenant is needed with a token's id")?, id),
                Err(_) => {
                    let owner = owners.find(&token).await?.context("that is no usable owner token")?;
                    anyhow::ensure!(owner.kind == gateway::Kind::Token, "that is a browser session, not an API token");
                    (owner.tenant, owner.token_id)
                }
            };
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

fn main() -> ExitCode {
    // RUST_LOG when set, otherwise info; JSON lines unless standard error is a terminal.
    telemetry::init_logs();
    let cli = Cli::parse();
    ops::run_main("grantctl", run(cli))
}
