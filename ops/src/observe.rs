//! What each `grantctl serve …` shows an operator: its metrics listener (loopback by default,
//! `<SERVICE>_METRICS_LISTEN`, `off` for none) with `/healthz` beside it, which fails when the
//! service's database cannot answer (and, for the workers, when a projection is frozen).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use telemetry::{Health, HealthCheck, MetricsListen, Registry};

/// The default metrics addresses, one port per service so they can share a host.
pub const AUTHORIZER_METRICS: &str = "127.0.0.1:9401";
pub const RUNTIME_METRICS: &str = "127.0.0.1:9402";
pub const GATEWAY_METRICS: &str = "127.0.0.1:9403";
pub const PROJECTIONS_METRICS: &str = "127.0.0.1:9404";
pub const CHECKPOINTS_METRICS: &str = "127.0.0.1:9405";
pub const MCP_METRICS: &str = "127.0.0.1:9406";

/// The gate's metrics for a server of `service` (`grant_ledger.v1.Authorizer`), with health and
/// reflection beside it.
pub fn gate_metrics(registry: &mut Registry, service: &str) -> transport::GateMetrics {
    let paths = proto::method_paths(service).into_iter().chain(transport::STANDARD_PATHS.map(str::to_owned));
    transport::GateMetrics::new(registry, paths)
}

/// Binds `listen` and serves `registry` and `health` on it for the life of the process; answers
/// the address bound, or none when the operator said `off`.
pub async fn serve_metrics(
    listen: MetricsListen,
    service: &str,
    registry: Registry,
    health: HealthCheck,
) -> Result<Option<SocketAddr>> {
    let MetricsListen::At(addr) = listen else {
        tracing::info!(service, "metrics are off");
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding metrics on {addr}"))?;
    let bound = listener.local_addr()?;
    println!("{service} metrics on http://{bound}/metrics");
    tokio::spawn(telemetry::serve(listener, Arc::new(registry), health, std::future::pending()));
    Ok(Some(bound))
}

/// Serving while `pool` can run a statement within two seconds.
pub fn database_health(pool: deadpool_postgres::Pool) -> HealthCheck {
    HealthCheck::new(move || {
        let pool = pool.clone();
        async move {
            let tried = tokio::time::timeout(Duration::from_secs(2), async {
                let client = pool.get().await.map_err(|e| e.to_string())?;
                client.simple_query("SELECT 1").await.map_err(|e| e.to_string())
            });
            // The words are fixed: a metrics port must not show the database's host or user.
            match tried.await {
                Ok(Ok(_)) => Health::Serving,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "health: the database cannot be read");
                    Health::Failing("the database cannot be read".into())
                }
                Err(_) => Health::Failing("the database did not answer within 2 s".into()),
            }
        }
    })
}

/// A pool of one connection for health checks, apart from the service's own: a busy service
/// still answers, and its health says whether the database does.
pub fn health_pool(pg_config: &tokio_postgres::Config) -> Result<deadpool_postgres::Pool> {
    ledger::postgres::bounded_pool(pg_config.clone(), 1, Duration::from_secs(2)).map_err(anyhow::Error::msg)
}

/// Serves the harness's metrics during a run when AGENT_METRICS_LISTEN names an address (a run
/// is one command, so by default there is none).
pub async fn harness_metrics(get: &impl Fn(&str) -> Option<String>) -> Result<()> {
    let listen = MetricsListen::parse(get, "AGENT", "off")?;
    let mut registry = Registry::default();
    agent::metrics::register(&mut registry);
    serve_metrics(listen, "harness", registry, HealthCheck::serving()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_fails_in_fixed_words_when_the_database_is_gone() {
        // Nothing listens on port 1: the connection is refused at once.
        let config: tokio_postgres::Config = "postgres://someone@127.0.0.1:1/db".parse().unwrap();
        let check = database_health(health_pool(&config).unwrap());
        assert_eq!(check.check().await, Health::Failing("the database cannot be read".into()));
    }
}
