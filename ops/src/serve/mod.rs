//! `grantctl serve authorizer`: typed configuration from the environment, parsed once at
//! start-up; then migrations, the sweep and approval reaper on an interval, and the gRPC server
//! for every tenant until Ctrl-C. Nothing is folded from the log: each request reads its own
//! state, so start-up does not grow with the log and replicas never disagree.
//!
//! Deployment settings (the task-grant flag and scopes, the standing-grant pin) are one recorded
//! truth per tenant, changed only by `grantctl settings apply`: a replica never writes them, so
//! two replicas started with different environments cannot flap between them. A replica started
//! with a setting in its environment refuses to start and names the command.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use authorizer::Authority;
use authorizer::PgGrants;
use authorizer::domain::{Command, StandingPin};
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, settings};
use authorizer::service::{AuthorizerService, serve};
use credentials::Credentials;
use ledger::{PgStore, TenantId};
use telemetry::MetricsListen;
use time::OffsetDateTime;

mod mcp;
mod owner_http;
#[cfg(test)]
mod tests;

pub use mcp::{McpConfig, McpLinks, mcp, stdio as mcp_stdio};
pub use owner_http::{GatewayConfig, gateway};

/// Everything the authorizer reads from its environment.
#[derive(Debug)]
pub struct AuthorizerConfig {
    pub database_url: Option<String>,
    pub listen: SocketAddr,
    pub policy: Policy,
    pub sweep_every: Duration,
    pub transport: Transport,
    /// Connections to PostgreSQL for deciding (AUTHORIZER_DB_POOL, default 32).
    pub pool_size: usize,
    /// Seals every allow's dispatch ticket (TICKET_KEYS_FILE, shared with the runtime).
    pub tickets: Arc<proto::ticket::Keyring>,
    /// AUTHORIZER_METRICS_LISTEN (default 127.0.0.1:9401).
    pub metrics: MetricsListen,
}

/// Credentials an authorizer replica remembers (each a few hundred bytes); past it, it forgets
/// them all and reads again.
const REMEMBERED_CREDENTIALS: usize = 10_000;

/// The variables `grantctl settings apply` records and the authorizer refuses.
pub const SETTINGS_VARIABLES: [&str; 5] = [
    "GRANT_LEDGER_TENANT",
    "BROWSER_TASK_GRANTS_ENABLED",
    "BROWSER_TASK_GRANT_SCOPES",
    "BROWSER_GRANT_ID",
    "BROWSER_PROFILE_ID",
];

/// A tenant's deployment settings as an operator configures them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentSettings {
    pub settings: TaskGrantSettings,
    /// The standing-grant pin (BROWSER_GRANT_ID on BROWSER_PROFILE_ID), if any.
    pub standing: Option<StandingPin>,
    /// The version of the policy (POLICY_FILE) every replica must run; unset, the recorded one
    /// stays: a settings change made without the file must not switch every replica off.
    pub policy_version: Option<String>,
}

impl DeploymentSettings {
    /// Parses BROWSER_TASK_GRANTS_ENABLED, BROWSER_TASK_GRANT_SCOPES, BROWSER_GRANT_ID,
    /// BROWSER_PROFILE_ID and POLICY_FILE; each refusal names the variable and the rule.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let settings =
            settings(get("BROWSER_TASK_GRANTS_ENABLED").as_deref(), get("BROWSER_TASK_GRANT_SCOPES").as_deref())?;
        let standing = match (get("BROWSER_GRANT_ID"), get("BROWSER_PROFILE_ID")) {
            (None, None) => None,
            (Some(grant_id), Some(profile_id)) => {
                for (var, value) in [("BROWSER_GRANT_ID", &grant_id), ("BROWSER_PROFILE_ID", &profile_id)] {
                    ledger::check_entity_id(var, value)
                        .map_err(|e| anyhow::anyhow!("{var}={value:?}: {}", e.reason))?;
                }
                Some(StandingPin { grant_id, profile_id })
            }
            _ => bail!("BROWSER_GRANT_ID and BROWSER_PROFILE_ID pin the standing grant together"),
        };
        let policy_version = policy_file(&get)?.map(|p| p.version);
        Ok(Self { settings, standing, policy_version })
    }
}

/// The policy POLICY_FILE names, if it names one.
fn policy_file(get: &impl Fn(&str) -> Option<String>) -> Result<Option<Policy>> {
    let Some(path) = get("POLICY_FILE") else { return Ok(None) };
    let bytes = std::fs::read(&path).with_context(|| format!("POLICY_FILE={path:?} cannot be read"))?;
    Ok(Some(Policy::parse(&bytes).with_context(|| format!("POLICY_FILE={path:?}"))?))
}

/// Records `wanted` as `tenant`'s settings and pin; returns the events recorded (none when they
/// are already in force). Grants whose scope is gone, or all once the flag is off, end with it.
pub async fn apply_settings(database_url: &str, tenant: &str, wanted: DeploymentSettings) -> Result<Vec<String>> {
    crate::migrate::run(&mut crate::connect(database_url).await?).await?;
    let tenant = authorizer::domain::tenant_id(tenant).map_err(|e| anyhow::anyhow!("--tenant {tenant:?}: {e}"))?;
    let pool = ledger::postgres::pool(database_url.parse()?, 2).map_err(anyhow::Error::msg)?;
    let authority = Authority::new(PgGrants::new(PgStore::new(pool)), Policy::empty(), tenant);
    // One command, one append: the settings and the pin never land apart.
    let apply = Command::ApplyDeployment {
        settings: wanted.settings,
        pin: wanted.standing,
        policy_version: wanted.policy_version,
        now: OffsetDateTime::now_utc(),
    };
    let events = authority.execute(apply, "operator").await?;
    Ok(events.iter().map(|e| e.event_type().to_owned()).collect())
}

/// The tenant's recorded task-grant settings, as lines: `task grants: on|off` and `scopes: …`.
pub async fn show_settings(database_url: &str, tenant: &str) -> Result<String> {
    crate::migrate::run(&mut crate::connect(database_url).await?).await?;
    let tenant = authorizer::domain::tenant_id(tenant).map_err(|e| anyhow::anyhow!("--tenant {tenant:?}: {e}"))?;
    let pool = ledger::postgres::pool(database_url.parse()?, 2).map_err(anyhow::Error::msg)?;
    let authority = Authority::new(PgGrants::new(PgStore::new(pool)), Policy::empty(), tenant);
    let settings = authority.read(authorizer::Need::Deployment { grants: false }, |w| w.settings.clone()).await?;
    let scopes: Vec<String> = settings.scopes.iter().map(|s| format!("{}{}", s.origin, s.path_prefix)).collect();
    Ok(format!(
        "task grants: {}\nscopes: {}",
        if settings.enabled { "on" } else { "off" },
        if scopes.is_empty() { "none".into() } else { scopes.join(", ") }
    ))
}

/// How the listener speaks.
#[derive(Debug)]
pub enum Transport {
    /// TLS with this certificate chain and key (PEM).
    Tls { cert_pem: Vec<u8>, key_pem: Vec<u8> },
    /// Plaintext, on a loopback address only: local development behind an explicit flag.
    InsecureLoopback,
}

impl AuthorizerConfig {
    /// Parses the settings `get` returns; each refusal names the variable and the rule.
    /// `insecure_loopback` is the command line's explicit consent to plaintext on loopback.
    pub fn parse(get: impl Fn(&str) -> Option<String>, insecure_loopback: bool) -> Result<Self> {
        let listen = get("AUTHORIZER_LISTEN").unwrap_or_else(|| "127.0.0.1:50051".into());
        let listen: SocketAddr = listen
            .parse()
            .with_context(|| format!("AUTHORIZER_LISTEN={listen:?} is not an address like 127.0.0.1:50051"))?;
        if let Some(var) = SETTINGS_VARIABLES.iter().find(|v| get(v).is_some()) {
            bail!(
                "{var} is set, but the authorizer serves every tenant with the settings recorded for it: record them \
                 with `grantctl settings apply --tenant T` (which reads these variables) and unset them here"
            );
        }
        let policy = policy_file(&get)?.unwrap_or_else(Policy::empty);
        let sweep = get("SWEEP_INTERVAL_SECONDS").unwrap_or_else(|| "30".into());
        let seconds: u64 =
            sweep.parse().with_context(|| format!("SWEEP_INTERVAL_SECONDS={sweep:?} is not a whole number"))?;
        if !(1..=3600).contains(&seconds) {
            bail!("SWEEP_INTERVAL_SECONDS={seconds} must be between 1 and 3600");
        }
        let transport = transport(&get, "AUTHORIZER", listen, insecure_loopback)?;
        let pool = get("AUTHORIZER_DB_POOL").unwrap_or_else(|| "32".into());
        let pool_size: usize =
            pool.parse().with_context(|| format!("AUTHORIZER_DB_POOL={pool:?} is not a whole number"))?;
        if !(1..=1000).contains(&pool_size) {
            bail!("AUTHORIZER_DB_POOL={pool_size} must be between 1 and 1000");
        }
        let metrics = MetricsListen::parse(&get, "AUTHORIZER", crate::observe::AUTHORIZER_METRICS)?;
        Ok(Self {
            metrics,
            // Last: a keyring is read only once everything else is known to be right.
            tickets: Arc::new(proto::ticket::Keyring::from_env(&get).map_err(anyhow::Error::msg)?),
            transport,
            database_url: get("DATABASE_URL"),
            listen,
            policy,
            sweep_every: Duration::from_secs(seconds),
            pool_size,
        })
    }
}

/// Applies the migrations, trying again when the connection was lost (a server restarting, a
/// backend terminated): a replica starting beside a busy database should not die of it. A
/// failure the server answered with an error code is final.
async fn migrate_retrying(database_url: &str) -> Result<()> {
    let mut attempt = 0;
    loop {
        let tried = async {
            crate::migrate::run(&mut crate::connect(database_url).await?).await?;
            anyhow::Ok(())
        };
        match tried.await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 5 && connection_lost(&e) => {
                attempt += 1;
                tracing::warn!(error = %format!("{e:#}"), attempt, "migrations: the connection was lost; trying again");
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn connection_lost(e: &anyhow::Error) -> bool {
    use tokio_postgres::error::SqlState;
    let lost = |p: &tokio_postgres::Error| match p.code() {
        None => true,
        // A terminated backend, a server shutting down or starting, a broken connection.
        Some(c) => {
            [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW].contains(c)
                || c.code().starts_with("08")
        }
    };
    e.chain().any(|c| c.downcast_ref::<tokio_postgres::Error>().is_some_and(|p| p.is_closed() || lost(p)))
}

/// Runs the authorizer until Ctrl-C.
pub async fn authorizer(config: AuthorizerConfig, database_url: String) -> Result<()> {
    migrate_retrying(&database_url).await?;
    let pg_config: tokio_postgres::Config = database_url.parse()?;
    // The authorizer's statements are keyed lookups (and the sweep's small range scans): one
    // generic plan serves every call, where PostgreSQL would otherwise re-plan the wide
    // one-statement use and read for each execution (measured in docs/performance.md). Options
    // the operator put in DATABASE_URL come after, so theirs win.
    let mut ledger_config = pg_config.clone();
    let options = match pg_config.get_options() {
        Some(given) => format!("-c plan_cache_mode=force_generic_plan {given}"),
        None => "-c plan_cache_mode=force_generic_plan".to_owned(),
    };
    ledger_config.options(&options);
    let pool = ledger::postgres::pool(ledger_config, config.pool_size).map_err(anyhow::Error::msg)?;
    // Credentials are looked up before a caller is known: on a pool of their own, with a bounded
    // wait, so a flood of made-up tokens cannot hold the ledger's connections.
    let pool_for_credentials =
        ledger::postgres::bounded_pool(pg_config.clone(), 4, Duration::from_secs(2)).map_err(anyhow::Error::msg)?;
    let backend = PgGrants::new(PgStore::with_listener(pool, pg_config.clone()));
    let mut registry = telemetry::Registry::default();
    let metrics = authorizer::AuthorizerMetrics::new(&mut registry);
    let gate = crate::observe::gate_metrics(&mut registry, "grant_ledger.v1.Authorizer");
    // The tenant here only names the handle: each call acts in its credential's tenant.
    let authority = Arc::new(Authority::metered(backend, config.policy, TenantId::new("default")?, metrics));
    let health = crate::observe::database_health(crate::observe::health_pool(&pg_config)?);
    crate::observe::serve_metrics(config.metrics, "authorizer", registry, health.clone()).await?;

    let sweeper = {
        let authority = Arc::clone(&authority);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(config.sweep_every);
            loop {
                tick.tick().await;
                // Every replica sweeps; the rows they lock make each end and expiry happen once.
                match authority.sweep(OffsetDateTime::now_utc()).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(recorded = n, "sweep recorded ends and expiries"),
                    Err(e) => tracing::warn!(error = %e, "sweep failed; retrying next interval"),
                }
            }
        })
    };

    let listener =
        tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(address = %listener.local_addr()?, "authorizer serving every tenant");
    println!("authorizer serving on {}", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: finishing requests in flight");
    };
    let tls = config.transport.server_tls()?;
    // Callers recognised from memory skip the lookup; every call still confirms its credential
    // live (an Authorize in its own read), so a revocation holds at the next call on every replica.
    let credentials = Credentials::postgres(pool_for_credentials).remembering(REMEMBERED_CREDENTIALS);
    let service = AuthorizerService::new(authority, credentials, config.tickets).with_health_check(health);
    // Metrics off: nothing is served, so nothing is recorded at the gate either.
    let service = match config.metrics {
        MetricsListen::Off => service,
        MetricsListen::At(_) => service.with_gate_metrics(gate),
    };
    let served = serve(listener, service, tls, shutdown).await;
    sweeper.abort();
    served.context("serving")
}

/// How a service listens: TLS from `<PREFIX>_TLS_CERT` and `<PREFIX>_TLS_KEY`, or plaintext on a
/// loopback address with the command line's explicit consent.
fn transport(
    get: &impl Fn(&str) -> Option<String>,
    prefix: &str,
    listen: SocketAddr,
    insecure_loopback: bool,
) -> Result<Transport> {
    let (cert_var, key_var) = (format!("{prefix}_TLS_CERT"), format!("{prefix}_TLS_KEY"));
    Ok(match (get(&cert_var), get(&key_var), insecure_loopback) {
        (Some(_), Some(_), true) => bail!("--insecure-loopback and {cert_var}/{key_var} exclude each other"),
        (Some(cert), Some(key), false) => Transport::Tls {
            cert_pem: std::fs::read(&cert).with_context(|| format!("{cert_var}={cert:?} cannot be read"))?,
            key_pem: std::fs::read(&key).with_context(|| format!("{key_var}={key:?} cannot be read"))?,
        },
        (None, None, true) if listen.ip().is_loopback() => Transport::InsecureLoopback,
        (None, None, true) => bail!("--insecure-loopback serves plaintext on loopback only; listening on {listen}"),
        (None, None, false) => {
            bail!("{cert_var} and {key_var} are required (or --insecure-loopback for local development)")
        }
        _ => bail!("{cert_var} and {key_var} are set together"),
    })
}

impl Transport {
    fn server_tls(&self) -> Result<Option<std::sync::Arc<transport::ServerConfig>>> {
        Ok(match self {
            Self::Tls { cert_pem, key_pem } => {
                Some(transport::tls_config(cert_pem, key_pem).map_err(|e| anyhow::anyhow!("the TLS identity: {e}"))?)
            }
            Self::InsecureLoopback => {
                tracing::warn!("--insecure-loopback: serving plaintext gRPC; credentials cross the socket unencrypted");
                None
            }
        })
    }
}

/// Everything `grantctl serve runtime` reads from its environment: RUNTIME_LISTEN and its TLS
/// files, and the runtime's own settings (browser, pool, authorizer, task records).
#[derive(Debug)]
pub struct RuntimeServeConfig {
    pub listen: SocketAddr,
    pub transport: Transport,
    pub runtime: browser_runtime::RuntimeConfig,
    /// RUNTIME_METRICS_LISTEN (default 127.0.0.1:9402).
    pub metrics: MetricsListen,
}

impl RuntimeServeConfig {
    pub fn parse(get: impl Fn(&str) -> Option<String>, insecure_loopback: bool) -> Result<Self> {
        let listen = get("RUNTIME_LISTEN").unwrap_or_else(|| "127.0.0.1:50061".into());
        let listen: SocketAddr = listen
            .parse()
            .with_context(|| format!("RUNTIME_LISTEN={listen:?} is not an address like 127.0.0.1:50061"))?;
        let transport = transport(&get, "RUNTIME", listen, insecure_loopback)?;
        let runtime = browser_runtime::RuntimeConfig::parse(&get)?;
        let metrics = MetricsListen::parse(&get, "RUNTIME", crate::observe::RUNTIME_METRICS)?;
        Ok(Self { listen, transport, runtime, metrics })
    }
}

/// Runs the browser runtime until Ctrl-C, then closes every browser it started. Its callers'
/// credentials are the authorizer's table in `database_url`.
pub async fn runtime(config: RuntimeServeConfig, database_url: String) -> Result<()> {
    if config.runtime.authorizer.is_none() {
        anyhow::bail!(
            "RUNTIME_AUTHORIZER_URL and RUNTIME_AUTHORIZER_TOKEN are required: the runtime reads the owner's Stop \
             there before every act, and redeems approval tokens there"
        );
    }
    crate::migrate::run(&mut crate::connect(&database_url).await?).await?;
    let pg_config: tokio_postgres::Config = database_url.parse()?;
    let pool =
        ledger::postgres::bounded_pool(pg_config.clone(), 4, Duration::from_secs(2)).map_err(anyhow::Error::msg)?;
    let mut registry = telemetry::Registry::default();
    browser_runtime::metrics::register(&mut registry);
    let gate = crate::observe::gate_metrics(&mut registry, "browser_runtime.v1.BrowserRuntime");
    let health = crate::observe::database_health(crate::observe::health_pool(&pg_config)?);
    crate::observe::serve_metrics(config.metrics, "browser runtime", registry, health.clone()).await?;
    let redeemer = browser_runtime::service::AuthorizerRedeemer::new(config.runtime.authorizer.as_ref())
        .map_err(anyhow::Error::msg)?;
    let runtime = browser_runtime::BrowserRuntime::new(config.runtime, Credentials::postgres(pool), redeemer)
        .with_health_check(health);
    let runtime = Arc::new(match config.metrics {
        MetricsListen::Off => runtime,
        MetricsListen::At(_) => runtime.with_gate_metrics(gate),
    });
    let listener =
        tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    println!("browser runtime serving on {}", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: closing every browser");
    };
    browser_runtime::service::serve(listener, runtime, config.transport.server_tls()?, shutdown)
        .await
        .context("serving")
}

/// Refuses a credential no call would accept: a tenant the authority cannot serve (over 64
/// bytes, a `.`, or characters a stream name cannot hold) or a principal that is no valid id.
pub fn credential_names(tenant: &str, principal: Option<&str>) -> Result<()> {
    authorizer::domain::tenant_id(tenant).map_err(|e| anyhow::anyhow!("--tenant {tenant:?}: {e}"))?;
    if let Some(p) = principal {
        ledger::check_entity_id("principal", p).map_err(|e| anyhow::anyhow!("--principal {p:?}: {}", e.reason))?;
    }
    Ok(())
}

#[cfg(test)]
mod credential_names_tests {
    #[test]
    fn names_no_call_accepts_are_refused_with_the_rule() {
        for (tenant, principal, words) in [
            (&"t".repeat(65)[..], None, "at most 64 bytes"),
            ("acme.prod", None, "no '.'"),
            ("acme", Some(&"p".repeat(121)[..]), "1 to 120 bytes"),
            ("acme", Some("a b"), "--principal"),
        ] {
            let e = format!("{:#}", super::credential_names(tenant, principal).unwrap_err());
            assert!(e.contains(words), "{tenant:?} {principal:?}: {e}");
        }
        super::credential_names(&"t".repeat(64), Some("owner-1")).unwrap();
    }
}
