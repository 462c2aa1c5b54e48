//! `grantctl serve gateway`: the owner's HTTP gateway and console, its links to the authorizer
//! and the browser runtime read from the environment.

use super::{Context, MetricsListen, Result, SocketAddr, Transport, bail, migrate_retrying, transport};

/// Everything `grantctl serve gateway` reads from its environment.
#[derive(Debug)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    pub transport: Transport,
    pub authorizer: gateway::AuthorizerLink,
    /// The browser runtime, for the live tab behind a pending card; none: that route is absent.
    pub runtime: Option<gateway::RuntimeLink>,
    pub rate_per_minute: u32,
    /// GATEWAY_METRICS_LISTEN (default 127.0.0.1:9403).
    pub metrics: MetricsListen,
}

/// `name`'s gRPC URL from the environment (`default` when unset): https://host:port, or http://
/// on a loopback address only; with its CA from `<name without _URL>_CA`.
pub(super) fn grpc_link(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: Option<&str>,
) -> Result<Option<(String, Option<Vec<u8>>)>> {
    let Some(url) = get(name).or_else(|| default.map(str::to_owned)) else { return Ok(None) };
    // Parsed, not matched by prefix: `http://127.0.0.1:1@elsewhere` names another host.
    let parsed: tonic::transport::Uri = url.parse().with_context(|| format!("{name}={url:?} is not a URL"))?;
    let loopback = parsed.host().is_some_and(|h| {
        h.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    });
    let plain_ok = parsed.scheme_str() == Some("http") && loopback;
    let has_userinfo = parsed.authority().is_some_and(|a| a.as_str().contains('@'));
    if has_userinfo || !(parsed.scheme_str() == Some("https") || plain_ok) {
        bail!("{name}={url:?} is https://host:port, or http:// on a loopback address only");
    }
    let ca = format!("{}_CA", name.trim_end_matches("_URL"));
    let ca_pem =
        get(&ca).map(|p| std::fs::read(&p).with_context(|| format!("{ca}={p:?} cannot be read"))).transpose()?;
    Ok(Some((url, ca_pem)))
}

impl GatewayConfig {
    /// GATEWAY_LISTEN (default 127.0.0.1:8443), GATEWAY_TLS_CERT and GATEWAY_TLS_KEY,
    /// GATEWAY_AUTHORIZER_URL (default http://127.0.0.1:50051), GATEWAY_AUTHORIZER_CA,
    /// GATEWAY_CREDENTIALS_FILE (`<tenant> <glc_ token>` lines: each tenant's gateway
    /// credential, which the runtime takes too), GATEWAY_RUNTIME_URL and GATEWAY_RUNTIME_CA
    /// (optional: the live tab behind a pending card) and GATEWAY_RATE_PER_MINUTE (default 600).
    pub fn parse(get: impl Fn(&str) -> Option<String>, insecure_loopback: bool) -> Result<Self> {
        let listen = get("GATEWAY_LISTEN").unwrap_or_else(|| "127.0.0.1:8443".into());
        let listen: SocketAddr = listen
            .parse()
            .with_context(|| format!("GATEWAY_LISTEN={listen:?} is not an address like 127.0.0.1:8443"))?;
        let transport = transport(&get, "GATEWAY", listen, insecure_loopback)?;
        let (url, ca_pem) = grpc_link(&get, "GATEWAY_AUTHORIZER_URL", Some("http://127.0.0.1:50051"))?
            .context("the authorizer's URL has a default")?;
        let runtime =
            grpc_link(&get, "GATEWAY_RUNTIME_URL", None)?.map(|(url, ca_pem)| gateway::RuntimeLink { url, ca_pem });
        let file = get("GATEWAY_CREDENTIALS_FILE").context(
            "GATEWAY_CREDENTIALS_FILE is required: lines of `<tenant> <glc_ token>`, a gateway credential each",
        )?;
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("GATEWAY_CREDENTIALS_FILE={file:?} cannot be read"))?;
        let credentials = gateway::AuthorizerLink::parse_credentials(&text)
            .map_err(|e| anyhow::anyhow!("GATEWAY_CREDENTIALS_FILE={file:?}: {e}"))?;
        if credentials.is_empty() {
            bail!("GATEWAY_CREDENTIALS_FILE={file:?} names no tenant");
        }
        let rate = get("GATEWAY_RATE_PER_MINUTE").unwrap_or_else(|| "600".into());
        let rate_per_minute: u32 =
            rate.parse().with_context(|| format!("GATEWAY_RATE_PER_MINUTE={rate:?} is not a whole number"))?;
        if !(1..=1_000_000).contains(&rate_per_minute) {
            bail!("GATEWAY_RATE_PER_MINUTE={rate_per_minute} must be between 1 and 1000000");
        }
        let metrics = MetricsListen::parse(&get, "GATEWAY", crate::observe::GATEWAY_METRICS)?;
        Ok(Self {
            listen,
            transport,
            authorizer: gateway::AuthorizerLink { url, ca_pem, credentials },
            runtime,
            rate_per_minute,
            metrics,
        })
    }
}

/// Runs the owner's gateway until Ctrl-C. Owner tokens live in `database_url`.
pub async fn gateway(config: GatewayConfig, database_url: String) -> Result<()> {
    migrate_retrying(&database_url).await?;
    let pg_config: tokio_postgres::Config = database_url.parse()?;
    let tls = match &config.transport {
        Transport::Tls { cert_pem, key_pem } => {
            Some(transport::tls_config_http1(cert_pem, key_pem).map_err(|e| anyhow::anyhow!("the TLS identity: {e}"))?)
        }
        Transport::InsecureLoopback => {
            tracing::warn!("--insecure-loopback: serving plaintext HTTP; owner tokens cross the socket unencrypted");
            None
        }
    };
    let mut registry = telemetry::Registry::default();
    gateway::metrics::register(&mut registry);
    let health = crate::observe::database_health(crate::observe::health_pool(&pg_config)?);
    crate::observe::serve_metrics(config.metrics, "gateway", registry, health).await?;
    let gw = gateway::Gateway::new(
        pg_config,
        &config.authorizer,
        gateway::RateLimit::per_minute(config.rate_per_minute),
        tls.is_some(),
    )
    .map_err(anyhow::Error::msg)?;
    let gw = match &config.runtime {
        Some(link) => gw.with_runtime(link).map_err(anyhow::Error::msg)?,
        None => gw,
    };
    let listener =
        tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    println!("gateway serving on {}", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: finishing requests in flight");
    };
    gateway::serve(listener, gw, tls, shutdown).await.context("serving")
}
