//! `grantctl serve authorizer`: typed configuration from the environment, parsed once at
//! start-up; then migrations, the authority recovered from the log, the sweep and approval
//! reaper on an interval, and the gRPC server until Ctrl-C.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use authorizer::auth::Credentials;
use authorizer::authority::Authority;
use authorizer::domain::{Command, StandingPin};
use authorizer::pg::PgGrants;
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, settings};
use authorizer::service::{AuthorizerService, serve};
use ledger::{PgStore, TenantId};
use time::OffsetDateTime;
use tonic::transport::{Identity, ServerTlsConfig};

/// Everything the authorizer reads from its environment.
#[derive(Debug)]
pub struct AuthorizerConfig {
    pub database_url: Option<String>,
    pub listen: SocketAddr,
    pub tenant: TenantId,
    pub settings: TaskGrantSettings,
    pub policy: Policy,
    pub sweep_every: Duration,
    pub transport: Transport,
    /// The operator's standing-grant pin (BROWSER_GRANT_ID on BROWSER_PROFILE_ID), if any.
    pub standing: Option<StandingPin>,
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
        let tenant = get("GRANT_LEDGER_TENANT").unwrap_or_else(|| "default".into());
        let tenant = TenantId::new(tenant.clone()).with_context(|| format!("GRANT_LEDGER_TENANT={tenant:?}"))?;
        let settings =
            settings(get("BROWSER_TASK_GRANTS_ENABLED").as_deref(), get("BROWSER_TASK_GRANT_SCOPES").as_deref())?;
        let policy = match get("POLICY_FILE") {
            Some(path) => {
                let bytes = std::fs::read(&path).with_context(|| format!("POLICY_FILE={path:?} cannot be read"))?;
                Policy::parse(&bytes).with_context(|| format!("POLICY_FILE={path:?}"))?
            }
            None => Policy::empty(),
        };
        let sweep = get("SWEEP_INTERVAL_SECONDS").unwrap_or_else(|| "30".into());
        let seconds: u64 =
            sweep.parse().with_context(|| format!("SWEEP_INTERVAL_SECONDS={sweep:?} is not a whole number"))?;
        if !(1..=3600).contains(&seconds) {
            bail!("SWEEP_INTERVAL_SECONDS={seconds} must be between 1 and 3600");
        }
        let transport = match (get("AUTHORIZER_TLS_CERT"), get("AUTHORIZER_TLS_KEY"), insecure_loopback) {
            (Some(_), Some(_), true) => bail!("--insecure-loopback and AUTHORIZER_TLS_CERT/KEY exclude each other"),
            (Some(cert), Some(key), false) => Transport::Tls {
                cert_pem: std::fs::read(&cert)
                    .with_context(|| format!("AUTHORIZER_TLS_CERT={cert:?} cannot be read"))?,
                key_pem: std::fs::read(&key).with_context(|| format!("AUTHORIZER_TLS_KEY={key:?} cannot be read"))?,
            },
            (None, None, true) if listen.ip().is_loopback() => Transport::InsecureLoopback,
            (None, None, true) => {
                bail!("--insecure-loopback serves plaintext on loopback only; AUTHORIZER_LISTEN={listen}")
            }
            (None, None, false) => bail!(
                "AUTHORIZER_TLS_CERT and AUTHORIZER_TLS_KEY are required (or --insecure-loopback for local development)"
            ),
            _ => bail!("AUTHORIZER_TLS_CERT and AUTHORIZER_TLS_KEY are set together"),
        };
        let standing = match (get("BROWSER_GRANT_ID"), get("BROWSER_PROFILE_ID")) {
            (None, None) => None,
            (Some(grant_id), Some(profile_id)) => {
                for (var, value) in [("BROWSER_GRANT_ID", &grant_id), ("BROWSER_PROFILE_ID", &profile_id)] {
                    ledger::StreamId::for_entity("x", value)
                        .map_err(|e| anyhow::anyhow!("{var}={value:?}: {}", e.reason))?;
                }
                Some(StandingPin { grant_id, profile_id })
            }
            _ => bail!("BROWSER_GRANT_ID and BROWSER_PROFILE_ID pin the standing grant together"),
        };
        Ok(Self {
            standing,
            transport,
            database_url: get("DATABASE_URL"),
            listen,
            tenant,
            settings,
            policy,
            sweep_every: Duration::from_secs(seconds),
        })
    }
}

/// Runs the authorizer until Ctrl-C.
pub async fn authorizer(config: AuthorizerConfig, database_url: String) -> Result<()> {
    crate::migrate::run(&mut crate::connect(&database_url).await?).await?;
    let pg_config: tokio_postgres::Config = database_url.parse()?;
    let pool = ledger::postgres::pool(pg_config.clone(), 32).map_err(anyhow::Error::msg)?;
    // Credentials are looked up before a caller is known: on a pool of their own, with a bounded
    // wait, so a flood of made-up tokens cannot hold the ledger's connections.
    let pool_for_credentials =
        ledger::postgres::bounded_pool(pg_config.clone(), 4, Duration::from_secs(2)).map_err(anyhow::Error::msg)?;
    let backend = PgGrants::new(PgStore::with_listener(pool, pg_config));
    let authority = Arc::new(Authority::recover(backend, config.policy, config.tenant.clone()).await?);
    authority.execute(Command::ChangeSettings(config.settings), "operator").await?;
    // The pin in the environment is the operator's: recorded when it differs from the one in force.
    let pin = Command::PinStandingGrant { pin: config.standing.clone(), now: OffsetDateTime::now_utc() };
    authority.execute(pin, "operator").await?;

    let sweeper = {
        let authority = Arc::clone(&authority);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(config.sweep_every);
            loop {
                tick.tick().await;
                let now = OffsetDateTime::now_utc();
                for command in [Command::Sweep { now }, Command::ExpireApprovals { now }] {
                    match authority.execute(command, "sweeper").await {
                        Ok(events) if !events.is_empty() => {
                            tracing::info!(ended = events.len(), "sweep recorded ends and expiries")
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "sweep failed; retrying next interval"),
                    }
                }
            }
        })
    };

    let listener =
        tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(address = %listener.local_addr()?, tenant = %config.tenant, "authorizer serving");
    println!("authorizer serving on {}", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: finishing requests in flight");
    };
    let tls = match &config.transport {
        Transport::Tls { cert_pem, key_pem } => {
            Some(ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem)))
        }
        Transport::InsecureLoopback => {
            tracing::warn!("--insecure-loopback: serving plaintext gRPC; credentials cross the socket unencrypted");
            None
        }
    };
    let credentials = Credentials::Postgres(pool_for_credentials);
    let service = AuthorizerService::new(authority, config.tenant.as_str(), credentials);
    let served = serve(listener, service, tls, shutdown).await;
    sweeper.abort();
    served.context("serving")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<AuthorizerConfig> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        AuthorizerConfig::parse(|k| map.get(k).cloned(), true)
    }

    #[test]
    fn defaults_and_refusals() {
        let c = parse(&[]).unwrap();
        assert_eq!(
            (c.listen.to_string().as_str(), c.tenant.as_str(), c.settings.enabled),
            ("127.0.0.1:50051", "default", false)
        );
        let c = parse(&[
            ("BROWSER_TASK_GRANTS_ENABLED", "true"),
            ("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/lesson"),
        ])
        .unwrap();
        assert_eq!(c.settings.scopes.len(), 1);
        for (vars, says) in [
            (vec![("AUTHORIZER_LISTEN", "nowhere")], "AUTHORIZER_LISTEN"),
            (vec![("GRANT_LEDGER_TENANT", "a b")], "GRANT_LEDGER_TENANT"),
            (
                vec![("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/lesson")],
                "requires BROWSER_TASK_GRANTS_ENABLED",
            ),
            (
                vec![
                    ("BROWSER_TASK_GRANTS_ENABLED", "1"),
                    ("BROWSER_TASK_GRANT_SCOPES", "https://www.example.org/checkout"),
                ],
                "sensitive",
            ),
            (vec![("POLICY_FILE", "/nonexistent/policy.json")], "POLICY_FILE"),
            (vec![("SWEEP_INTERVAL_SECONDS", "0")], "between 1 and 3600"),
            (vec![("SWEEP_INTERVAL_SECONDS", "soon")], "SWEEP_INTERVAL_SECONDS"),
            (vec![("AUTHORIZER_LISTEN", "0.0.0.0:50051")], "plaintext on loopback only"),
            (vec![("AUTHORIZER_TLS_CERT", "/x.pem"), ("AUTHORIZER_TLS_KEY", "/y.pem")], "exclude each other"),
            (vec![("BROWSER_GRANT_ID", "g-1")], "together"),
            (vec![("BROWSER_GRANT_ID", "g 1"), ("BROWSER_PROFILE_ID", "p-1")], "BROWSER_GRANT_ID"),
        ] {
            let err = format!("{:#}", parse(&vars).unwrap_err());
            assert!(err.contains(says), "{vars:?}: {err}");
        }
    }

    #[test]
    fn tls_is_required_without_the_explicit_flag() {
        let tls = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
            AuthorizerConfig::parse(|k| map.get(k).cloned(), false)
        };
        for (vars, says) in [
            (vec![], "AUTHORIZER_TLS_CERT and AUTHORIZER_TLS_KEY are required"),
            (vec![("AUTHORIZER_TLS_CERT", "/x.pem")], "set together"),
            (vec![("AUTHORIZER_TLS_CERT", "/nonexistent.pem"), ("AUTHORIZER_TLS_KEY", "/k.pem")], "cannot be read"),
        ] {
            let err = format!("{:#}", tls(&vars).unwrap_err());
            assert!(err.contains(says), "{vars:?}: {err}");
        }
        let dir = std::env::temp_dir().join(format!("grantctl-tls-{}", uuid::Uuid::new_v4().simple()));
        crate::tls::DevPki::generate().unwrap().write(&dir).unwrap();
        let (_, cert, key) = crate::tls::DevPki::paths(&dir);
        let c = tls(&[("AUTHORIZER_TLS_CERT", cert.to_str().unwrap()), ("AUTHORIZER_TLS_KEY", key.to_str().unwrap())])
            .unwrap();
        assert!(matches!(c.transport, Transport::Tls { .. }));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
