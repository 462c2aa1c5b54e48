//! `grantctl status`: what an operator opens first. Each service's health (its metrics
//! listener's `/healthz`), each projection's checkpoint and lag, the log's Merkle tree and its
//! newest signed checkpoint, the active task grants and
//! pending cards per tenant, and the errors each service has answered since it started (from its
//! metrics: the server-side gRPC codes and HTTP 5xx), in one screen.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A service to ask, and where its metrics listener is (none: off; an error: unreadable).
#[derive(Debug, Clone)]
pub struct Service {
    pub name: &'static str,
    pub metrics: Result<Option<SocketAddr>, String>,
}

/// The services as the environment places them (the variables `grantctl serve` reads). A client
/// may read any address: the loopback rule is the listener's, not the reader's.
pub fn services(get: impl Fn(&str) -> Option<String>) -> Vec<Service> {
    use crate::observe::{
        AUTHORIZER_METRICS, CHECKPOINTS_METRICS, GATEWAY_METRICS, PROJECTIONS_METRICS, RUNTIME_METRICS,
    };
    let each = [
        ("authorizer", "AUTHORIZER", AUTHORIZER_METRICS),
        ("browser runtime", "RUNTIME", RUNTIME_METRICS),
        ("gateway", "GATEWAY", GATEWAY_METRICS),
        ("projection workers", "PROJECTIONS", PROJECTIONS_METRICS),
        ("checkpoint service", "CHECKPOINTS", CHECKPOINTS_METRICS),
    ];
    each.into_iter()
        .map(|(name, prefix, default)| {
            let var = format!("{prefix}_METRICS_LISTEN");
            let value = get(&var).unwrap_or_else(|| default.to_owned());
            let metrics = match value.as_str() {
                "off" => Ok(None),
                v => v.parse().map(Some).map_err(|_| format!("{var}={v:?} is not an address")),
            };
            Service { name, metrics }
        })
        .collect()
}

/// Server-side gRPC codes: the service's failure, not the caller's.
const SERVER_CODES: [&str; 5] = ["Internal", "Unavailable", "Unknown", "DataLoss", "DeadlineExceeded"];

/// The report, as text.
pub async fn report(config: &tokio_postgres::Config, services: &[Service]) -> Result<String> {
    let mut out = String::from("services\n");
    let mut errors = Vec::new();
    for s in services {
        let addr = match &s.metrics {
            Ok(Some(addr)) => *addr,
            Ok(None) => {
                writeln!(out, "  {:<20} metrics off: health unknown", s.name)?;
                continue;
            }
            Err(e) => {
                writeln!(out, "  {:<20} {e}", s.name)?;
                continue;
            }
        };
        let health = match get(addr, "/healthz").await {
            Ok((200, _)) => "serving".to_owned(),
            Ok((status, body)) => format!("FAILING ({status}): {}", body.trim()),
            Err(e) => format!("UNREACHABLE: {e}"),
        };
        writeln!(out, "  {:<20} {addr:<21} {health}", s.name)?;
        if let Ok((200, text)) = get(addr, "/metrics").await {
            errors.extend(server_errors(&text).into_iter().map(|e| format!("{:<20} {e}", s.name)));
        }
    }
    let client = crate::connect_config(config).await;
    match client {
        Err(e) => writeln!(out, "database\n  UNREACHABLE: {e:#}")?,
        Ok(client) => {
            out.push_str("projections\n");
            let standings = projections::worker::standings(&client).await?;
            for p in &standings {
                let frozen = if p.lag_events > 0 && p.lag_seconds >= 30.0 { "  BEHIND" } else { "" };
                let capped = i64::try_from(p.lag_events).is_ok_and(|n| n >= projections::worker::LAG_COUNT_CAP);
                writeln!(
                    out,
                    "  {:<20} at {:<10} {}{} event(s) behind, the first {:.1} s old{frozen}",
                    p.projection.name(),
                    p.checkpoint.position,
                    if capped { "at least " } else { "" },
                    p.lag_events,
                    p.lag_seconds
                )?;
            }
            for p in projections::Projection::ALL {
                if !standings.iter().any(|s| s.projection == p) {
                    writeln!(out, "  {:<20} not registered: its worker has never run", p.name())?;
                }
            }
            out.push_str(&log_proof(&client).await?);
            out.push_str("tenants\n");
            let rows = client
                .query(
                    "WITH g AS (SELECT tenant_id, count(*) AS n FROM active_task_grants \
                       WHERE ended_at IS NULL AND expires_at > now() AND actions_used < $1 GROUP BY tenant_id), \
                     a AS (SELECT tenant_id, count(*) AS n FROM authority_approvals \
                       WHERE pending_until > now() GROUP BY tenant_id) \
                     SELECT coalesce(g.tenant_id, a.tenant_id), coalesce(g.n, 0), coalesce(a.n, 0) \
                     FROM g FULL JOIN a ON a.tenant_id = g.tenant_id \
                     ORDER BY coalesce(g.tenant_id, a.tenant_id) COLLATE \"C\"",
                    &[&i32::try_from(grant_domain::limits::MAX_ACTIONS)?],
                )
                .await?;
            if rows.is_empty() {
                out.push_str("  no active grants and no pending cards\n");
            }
            for r in rows {
                let (tenant, grants, cards): (String, i64, i64) = (r.get(0), r.get(1), r.get(2));
                writeln!(out, "  {tenant:<20} {grants} active grant(s), {cards} pending card(s)")?;
            }
        }
    }
    out.push_str("errors answered since each service started\n");
    if errors.is_empty() {
        out.push_str("  none\n");
    }
    for e in errors {
        writeln!(out, "  {e}")?;
    }
    Ok(out)
}

/// Checkpoints older than this, with events after them, are called stale.
const STALE: f64 = 300.0;

/// The Merkle tree's reach and the newest signed checkpoint's age: a log nobody signs any more
/// proves nothing new, so it shows here first.
async fn log_proof(client: &tokio_postgres::Client) -> Result<String> {
    let mut out = String::from("log proof\n");
    let behind: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM events e, log_tree_head h \
             WHERE (e.tx_id, e.global_position) > (h.tx_id, h.global_position) LIMIT 100000) AS b",
            &[],
        )
        .await?
        .get(0);
    let size: i64 = client.query_one("SELECT size FROM log_tree_head", &[]).await?.get(0);
    writeln!(out, "  {:<20} {size} leaves, {behind} event(s) not in it yet", "tree")?;
    let newest = client
        .query_opt(
            "SELECT tree_size, extract(epoch FROM now() - signed_at)::float8 FROM log_checkpoints \
             ORDER BY log_checkpoints.tree_size DESC LIMIT 1",
            &[],
        )
        .await?;
    match newest {
        None => writeln!(
            out,
            "  {:<20} no checkpoint signed yet: nothing is proven (run `grantctl serve checkpoints`)",
            "checkpoint"
        )?,
        Some(r) => {
            let (signed, age): (i64, f64) = (r.get(0), r.get(1));
            let stale = if age > STALE && (behind > 0 || size > signed) { "  STALE" } else { "" };
            writeln!(out, "  {:<20} newest of size {signed}, signed {age:.0} s ago{stale}", "checkpoint")?;
        }
    }
    Ok(out)
}

/// The server-side failures an exposition counts: gRPC calls by method and code, HTTP 5xx by route.
fn server_errors(exposition: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in exposition.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(n) = value.parse::<f64>() else { continue };
        if n <= 0.0 {
            continue;
        }
        let label = |name: &str| {
            series.split(&format!("{name}=\"")).nth(1).and_then(|rest| rest.split('"').next()).unwrap_or_default()
        };
        if series.starts_with("grpc_server_handled_total{") && SERVER_CODES.contains(&label("grpc_code")) {
            found.push(format!("{}/{} {}: {n}", label("grpc_service"), label("grpc_method"), label("grpc_code")));
        }
        if series.starts_with("http_server_request_duration_seconds_count{") && label("status").starts_with('5') {
            found.push(format!("{} {} {}: {n}", label("method"), label("route"), label("status")));
        }
    }
    found
}

/// `GET path` on a metrics listener: its status and body, within two seconds.
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let asked = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
            .await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(2), asked).await??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_servers_own_failures_are_errors() {
        let text = "grpc_server_handled_total{grpc_service=\"a.B\",grpc_method=\"M\",grpc_code=\"Unavailable\"} 3\n\
                    grpc_server_handled_total{grpc_service=\"a.B\",grpc_method=\"M\",grpc_code=\"NotFound\"} 9\n\
                    grpc_server_handled_total{grpc_service=\"a.B\",grpc_method=\"M\",grpc_code=\"Internal\"} 0\n\
                    http_server_request_duration_seconds_count{method=\"GET\",route=\"/v1/me\",status=\"503\"} 2\n\
                    http_server_request_duration_seconds_count{method=\"GET\",route=\"/v1/me\",status=\"404\"} 2\n";
        assert_eq!(super::server_errors(text), ["a.B/M Unavailable: 3", "GET /v1/me 503: 2"]);
    }
}
