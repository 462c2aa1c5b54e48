//! `grantctl serve mcp` and `grantctl mcp stdio`: the guarded browser for MCP clients, its links
//! to the authorizer and the runtime read from the environment. It holds no credential: each
//! client's key, made by its owner on the console, is forwarded.

use std::time::Duration;

use super::owner_http::grpc_link;
use super::{Context, MetricsListen, Result, SocketAddr, Transport, bail, transport};

/// What both ways of serving MCP read.
#[derive(Debug)]
pub struct McpLinks {
    authorizer: (String, Option<Vec<u8>>),
    runtime: (String, Option<Vec<u8>>),
    console_url: String,
    approval_wait: Duration,
    idle: Duration,
    max_steps: u32,
}

/// Everything `grantctl serve mcp` reads from its environment.
#[derive(Debug)]
pub struct McpConfig {
    pub listen: SocketAddr,
    pub transport: Transport,
    pub allowed_hosts: Vec<String>,
    pub links: McpLinks,
    /// MCP_METRICS_LISTEN (default 127.0.0.1:9406).
    pub metrics: MetricsListen,
}

fn seconds(get: &impl Fn(&str) -> Option<String>, name: &str, default: u64, max: u64) -> Result<Duration> {
    let text = get(name).unwrap_or_else(|| default.to_string());
    let n: u64 = text.parse().with_context(|| format!("{name}={text:?} is not a whole number of seconds"))?;
    if !(1..=max).contains(&n) {
        bail!("{name}={n} must be between 1 and {max}");
    }
    Ok(Duration::from_secs(n))
}

impl McpLinks {
    /// MCP_AUTHORIZER_URL and _CA, MCP_RUNTIME_URL and _CA, MCP_CONSOLE_URL,
    /// MCP_APPROVAL_WAIT_SECONDS, MCP_IDLE_SECONDS and MCP_MAX_STEPS.
    pub fn parse(get: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        let authorizer = grpc_link(get, "MCP_AUTHORIZER_URL", Some("http://127.0.0.1:50051"))?
            .context("the authorizer's URL has a default")?;
        let runtime = grpc_link(get, "MCP_RUNTIME_URL", Some("http://127.0.0.1:50061"))?
            .context("the runtime's URL has a default")?;
        // `localhost`, as the sign-in link names it: the console's cookie is the host's.
        let console_url = get("MCP_CONSOLE_URL").unwrap_or_else(|| "https://localhost:8443".into());
        let parsed =
            url::Url::parse(&console_url).with_context(|| format!("MCP_CONSOLE_URL={console_url:?} is not a URL"))?;
        if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none() {
            bail!("MCP_CONSOLE_URL={console_url:?} is the console's https://host:port");
        }
        let max_steps = get("MCP_MAX_STEPS").unwrap_or_else(|| "200".into());
        let max_steps: u32 =
            max_steps.parse().with_context(|| format!("MCP_MAX_STEPS={max_steps:?} is not a whole number"))?;
        if !(1..=10_000).contains(&max_steps) {
            bail!("MCP_MAX_STEPS={max_steps} must be between 1 and 10000");
        }
        Ok(Self {
            authorizer,
            runtime,
            console_url,
            approval_wait: seconds(get, "MCP_APPROVAL_WAIT_SECONDS", 600, 600)?,
            idle: seconds(get, "MCP_IDLE_SECONDS", 900, 86_400)?,
            max_steps,
        })
    }

    /// The server these links make; its channels connect at their first call.
    pub fn server(&self) -> Result<mcp::Server> {
        let channel = |(url, ca): &(String, Option<Vec<u8>>)| -> Result<tonic::transport::Channel> {
            let mut endpoint =
                tonic::transport::Endpoint::from_shared(url.clone())?.connect_timeout(Duration::from_secs(5));
            if url.starts_with("https://") {
                let mut tls = tonic::transport::ClientTlsConfig::new().with_enabled_roots();
                if let Some(ca) = ca {
                    tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(ca));
                }
                endpoint = endpoint.tls_config(tls)?;
            }
            Ok(endpoint.connect_lazy())
        };
        Ok(mcp::Server::new(mcp::Config {
            authorizer: channel(&self.authorizer)?,
            runtime: channel(&self.runtime)?,
            console_url: self.console_url.clone(),
            agent_version: concat!("mcp-", env!("CARGO_PKG_VERSION")).to_owned(),
            max_steps: self.max_steps,
            approval_wait: self.approval_wait,
            idle: self.idle,
        }))
    }
}

impl McpConfig {
    /// MCP_LISTEN (default 127.0.0.1:8766), MCP_TLS_CERT and MCP_TLS_KEY, MCP_ALLOWED_HOSTS
    /// (comma-separated; loopback's names when unset) and the links.
    pub fn parse(get: impl Fn(&str) -> Option<String>, insecure_loopback: bool) -> Result<Self> {
        let listen = get("MCP_LISTEN").unwrap_or_else(|| "127.0.0.1:8766".into());
        let listen: SocketAddr =
            listen.parse().with_context(|| format!("MCP_LISTEN={listen:?} is not an address like 127.0.0.1:8766"))?;
        let transport = transport(&get, "MCP", listen, insecure_loopback)?;
        let allowed_hosts = match get("MCP_ALLOWED_HOSTS") {
            Some(list) => list.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).collect(),
            None => vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
        };
        let links = McpLinks::parse(&get)?;
        let metrics = MetricsListen::parse(&get, "MCP", crate::observe::MCP_METRICS)?;
        Ok(Self { listen, transport, allowed_hosts, links, metrics })
    }
}

/// Serves MCP over Streamable HTTP until Ctrl-C.
pub async fn mcp(config: McpConfig) -> Result<()> {
    let tls = match &config.transport {
        Transport::Tls { cert_pem, key_pem } => {
            Some(transport::tls_config_http1(cert_pem, key_pem).map_err(|e| anyhow::anyhow!("the TLS identity: {e}"))?)
        }
        Transport::InsecureLoopback => {
            tracing::warn!("--insecure-loopback: serving plaintext HTTP; agent keys cross the socket unencrypted");
            None
        }
    };
    let mut registry = telemetry::Registry::default();
    mcp::metrics::register(&mut registry);
    crate::observe::serve_metrics(config.metrics, "mcp", registry, telemetry::HealthCheck::serving()).await?;
    let server = config.links.server()?;
    let listener =
        tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("mcp serving on {scheme}://{}/mcp", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    mcp::serve_http(listener, server, tls, config.allowed_hosts, shutdown).await.context("serving")
}

/// Serves one MCP client over stdin and stdout, with its key from MCP_KEY or the file
/// MCP_KEY_FILE. Logs go to stderr.
pub async fn stdio(get: impl Fn(&str) -> Option<String>) -> Result<()> {
    let key = match (get("MCP_KEY"), get("MCP_KEY_FILE")) {
        (Some(_), Some(_)) => bail!("give MCP_KEY or MCP_KEY_FILE, not both"),
        (Some(k), None) => k,
        (None, Some(f)) => std::fs::read_to_string(&f).with_context(|| format!("MCP_KEY_FILE={f:?} cannot be read"))?,
        (None, None) => bail!("MCP_KEY or MCP_KEY_FILE is required: the key the owner made on the chat's console page"),
    };
    let server = McpLinks::parse(&get)?.server()?;
    mcp::serve_stdio(server, key.trim().to_owned()).await.context("serving over stdio")
}
