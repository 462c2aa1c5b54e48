//! Hosted models over HTTPS: an OpenAI-compatible chat-completions endpoint or Anthropic's
//! Messages API, each with tool calling, through one well-kept client (reqwest over rustls).
//! Each step is one request: the run's system prompt, the step's prompt as the user's message,
//! the contract's tools. Nothing a model answers is trusted: its calls go through the rules like
//! any model's.
//!
//! A model call acts on nothing, so a retry cannot act twice: a timeout, a dropped connection,
//! a 429 or a 5xx is tried again, after the wait the provider's `Retry-After` asks for (within
//! [`Config::longest_wait`]) or a growing backoff. Any other answer is final. The key travels only
//! in its header; no error, log line or `Debug` holds it.

mod anthropic;
mod openai;
mod reply;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::model::{Model, ModelError, Turn, View};

pub use anthropic::turn_of as anthropic_turn;
pub use openai::turn_of as openai_turn;

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `POST {base}/chat/completions`, `Authorization: Bearer`.
    OpenAi,
    /// `POST {base}/messages`, `x-api-key`, `anthropic-version`.
    Anthropic,
}

impl Kind {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// The provider's own address, for a configuration that names none.
    pub fn default_base(self) -> &'static str {
        match self {
            Self::OpenAi => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com/v1",
        }
    }
}

/// An API key. It is written only into its request header: `Debug` and `Display` redact it.
#[derive(Clone, Default)]
pub struct Key(String);

impl Key {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into().trim().to_owned())
    }

    /// The key in the file at `path` (one line; surrounding white space dropped).
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("the model key file {}: {e}", path.display()))?;
        let key = Self::new(text);
        if key.0.is_empty() {
            return Err(format!("the model key file {} is empty", path.display()));
        }
        Ok(key)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every occurrence of the key replaced: what a provider echoes back is never
    /// shown with it.
    fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 { text.to_owned() } else { text.replace(&self.0, "[REDACTED]") }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key([REDACTED])")
    }
}

/// Where and how to reach a provider. Its `Debug` shows neither the key nor the proxy's URL
/// (which may hold a password).
#[derive(Clone)]
pub struct Config {
    pub kind: Kind,
    /// `https://…` anywhere, or `http://` on loopback only (a local model or a test stub).
    pub base_url: String,
    pub model: String,
    pub key: Key,
    /// One request's whole time, connection to the last byte.
    pub timeout: Duration,
    /// Further tries after a failure a retry may cure.
    pub retries: u32,
    /// The longest `Retry-After` honoured: a provider asking for more ends the step now, named.
    pub longest_wait: Duration,
    /// The longest a step's tries and waits take together: the run holds a browser and maybe a
    /// card meanwhile.
    pub longest_step: Duration,
    /// A PEM bundle trusted instead of the system's roots.
    pub ca_bundle: Option<Vec<u8>>,
    /// `HTTPS_PROXY`, and the `NO_PROXY` list that bypasses it.
    pub proxy: Option<String>,
    pub no_proxy: Option<String>,
    /// The most a reply may say (the model answers one tool call).
    pub max_tokens: u32,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("key", &self.key)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("longest_step", &self.longest_step)
            .field("ca_bundle", &self.ca_bundle.as_ref().map(Vec::len))
            .field("proxy", &self.proxy.as_ref().map(|_| "[set]"))
            .field("no_proxy", &self.no_proxy)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A provider at its own address (or `base_url`), with the defaults a run uses.
    pub fn new(kind: Kind, base_url: Option<String>, model: String, key: Key) -> Self {
        Self {
            kind,
            base_url: base_url.unwrap_or_else(|| kind.default_base().to_owned()),
            model,
            key,
            timeout: Duration::from_secs(60),
            retries: 3,
            longest_wait: Duration::from_secs(60),
            longest_step: Duration::from_secs(300),
            ca_bundle: None,
            proxy: None,
            no_proxy: None,
            max_tokens: 1024,
        }
    }
}

/// A model behind a provider's API.
pub struct Provider {
    config: Config,
    url: reqwest::Url,
    client: reqwest::Client,
    /// The run's system prompt (rendered from the record's text once per run).
    system: String,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("config", &self.config)
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

impl Provider {
    /// Checks the configuration and builds the client; nothing is sent.
    pub fn new(config: Config) -> Result<Self, String> {
        let base = reqwest::Url::parse(config.base_url.trim_end_matches('/'))
            .map_err(|e| format!("the model URL {:?} is not a URL: {e}", config.base_url))?;
        match base.scheme() {
            "https" => {}
            "http" => {
                let loopback = match base.host() {
                    Some(url::Host::Domain(d)) => d == "localhost",
                    Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                    Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                    None => false,
                };
                if !loopback {
                    return Err("plain HTTP to a model is taken on loopback only: use https://".into());
                }
            }
            other => return Err(format!("the model URL's scheme is https, not {other}")),
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err("the model URL holds no credentials: give the key by file or environment".into());
        }
        if config.model.trim().is_empty() {
            return Err("a model name is required".into());
        }
        if config.key.is_empty() && base.scheme() == "https" {
            return Err(format!("the {} key is empty", config.kind.name()));
        }
        if reqwest::header::HeaderValue::from_str(&config.key.0).is_err() {
            return Err(format!("the {} key holds characters no header can carry", config.kind.name()));
        }
        let path = match config.kind {
            Kind::OpenAi => "chat/completions",
            Kind::Anthropic => "messages",
        };
        // The endpoint's path goes after the base's, before any query it has.
        let mut url = base.clone();
        url.path_segments_mut()
            .map_err(|()| "the model URL cannot take a path".to_owned())?
            .pop_if_empty()
            .extend(path.split('/'));
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("grant-ledger-agent/", env!("CARGO_PKG_VERSION")))
            // Only the proxy the configuration names (read from HTTPS_PROXY by the caller).
            .no_proxy();
        if let Some(pem) = &config.ca_bundle {
            let roots = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("the model CA bundle is not PEM certificates: {e}"))?;
            if roots.is_empty() {
                return Err("the model CA bundle holds no certificate".into());
            }
            builder = builder.tls_built_in_root_certs(false);
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        // Only https requests go through the proxy: plain http is loopback's, never a proxy's.
        if let Some(proxy) = config.proxy.as_deref().filter(|p| !p.is_empty()) {
            let mut p = reqwest::Proxy::https(proxy).map_err(|_| "the proxy setting is not a URL".to_owned())?;
            p = p.no_proxy(config.no_proxy.as_deref().and_then(reqwest::NoProxy::from_string));
            builder = builder.proxy(p);
        }
        let client = builder.build().map_err(|e| format!("the model client: {e}"))?;
        Ok(Self { config, url, client, system: crate::prompt::SYSTEM.to_owned() })
    }

    /// The system prompt this provider sends with every step (the run's rendering of it).
    pub fn with_system(mut self, system: String) -> Self {
        self.system = system;
        self
    }

    fn body(&self, view: View<'_>) -> Value {
        let system = if view.system.is_empty() { self.system.as_str() } else { view.system };
        match self.config.kind {
            Kind::OpenAi => openai::body(&self.config.model, system, view.prompt),
            Kind::Anthropic => anthropic::body(&self.config.model, self.config.max_tokens, system, view.prompt),
        }
    }

    fn request(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        let r = self.client.post(self.url.clone()).header("content-type", "application/json").body(body);
        let mut key = reqwest::header::HeaderValue::from_str(&match self.config.kind {
            Kind::OpenAi => format!("Bearer {}", self.config.key.0),
            Kind::Anthropic => self.config.key.0.clone(),
        })
        .unwrap_or_else(|_| reqwest::header::HeaderValue::from_static(""));
        // Kept out of any debug output of the request.
        key.set_sensitive(true);
        match self.config.kind {
            Kind::OpenAi => r.header(reqwest::header::AUTHORIZATION, key),
            Kind::Anthropic => r.header("x-api-key", key).header("anthropic-version", "2023-06-01"),
        }
    }

    /// Who answered, for an error: the provider and the host, never the key.
    fn who(&self) -> String {
        format!("{} at {}", self.config.kind.name(), self.url.host_str().unwrap_or("?"))
    }

    /// The provider's own words in an error reply, bounded, the key scrubbed.
    fn message_of(&self, bytes: &[u8]) -> String {
        let said = serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().or(v["error"].as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(bytes).into_owned());
        // Controls out first (a key echoed with one inside would pass the scrub), then scrubbed
        // whole, then cut (a cut through the key would leave a part of it).
        let said: String = said.chars().filter(|c| !c.is_control()).collect();
        self.config.key.scrub(&said).chars().take(300).collect()
    }

    /// One try, within `left`: the answer, or why it failed and whether (and after how long) to
    /// try again.
    async fn attempt(&self, body: &[u8], left: Duration) -> Result<Value, Failed> {
        let reply = match self.request(body.to_vec()).timeout(self.config.timeout.min(left)).send().await {
            Ok(r) => r,
            Err(e) => {
                // Without the URL: only the failure's own words are read below.
                let e = e.without_url();
                let what = if e.is_timeout() { "did not answer in time".to_owned() } else { transport(&e) };
                let what = self.config.key.scrub(&what);
                // A certificate the client does not trust will not be trusted on a retry.
                if what.contains("certificate") {
                    return Err(Failed::Final(format!(
                        "could not be trusted: {what} (a private CA is given as the model's CA bundle)"
                    )));
                }
                return Err(Failed::Again { why: what, after: None });
            }
        };
        let status = reply.status().as_u16();
        let after = retry_after(reply.headers());
        let bytes = read_bounded(reply).await?;
        match status {
            200..=299 => serde_json::from_slice(&bytes)
                .map_err(|e| Failed::Final(format!("answered {status} with a body that is not JSON: {e}"))),
            429 | 500..=599 => {
                Err(Failed::Again { why: format!("answered {status}: {}", self.message_of(&bytes)), after })
            }
            _ => Err(Failed::Final(format!("answered {status}: {}", self.message_of(&bytes)))),
        }
    }
}

/// Why one try failed.
enum Failed {
    /// A retry may cure it; `after` is the wait the provider asked for.
    Again {
        why: String,
        after: Option<Duration>,
    },
    Final(String),
}

/// Every string in `v` with the key scrubbed (an escalation's detail is recorded).
fn scrub_strings(v: &mut Value, key: &Key) {
    match v {
        Value::String(s) => *s = key.scrub(s),
        Value::Array(items) => items.iter_mut().for_each(|i| scrub_strings(i, key)),
        Value::Object(map) => map.values_mut().for_each(|i| scrub_strings(i, key)),
        _ => {}
    }
}

/// A reply is bounded: a model answering megabytes is not answering one tool call.
const LONGEST_REPLY: usize = 1024 * 1024;

async fn read_bounded(mut reply: reqwest::Response) -> Result<Vec<u8>, Failed> {
    let mut out = Vec::new();
    let broke =
        |e: reqwest::Error| Failed::Again { why: format!("the reply broke off: {}", transport(&e)), after: None };
    while let Some(chunk) = reply.chunk().await.map_err(broke)? {
        if out.len() + chunk.len() > LONGEST_REPLY {
            return Err(Failed::Final(format!("answered with more than {LONGEST_REPLY} bytes")));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A transport error in words, with its causes (reqwest's own text names only the outermost).
fn transport(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(std::time::SystemTime::now()).unwrap_or_default())
}

/// The wait before try `attempt` (1-based) when the provider named none: 0.5 s, 1 s, 2 s, … up
/// to 8 s, with a spread so replicas do not retry in step.
fn backoff(attempt: u32) -> Duration {
    let base = Duration::from_millis(500) * 2u32.saturating_pow(attempt.saturating_sub(1).min(4));
    let spread = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_millis());
    base.min(Duration::from_secs(8)) + Duration::from_millis(u64::from(spread % 100))
}

impl Model for Provider {
    async fn next(&mut self, view: View<'_>) -> Result<Turn, ModelError> {
        let body = serde_json::to_vec(&self.body(view)).map_err(|e| ModelError(e.to_string()))?;
        let fail = |why: String| ModelError(format!("the model {} {why}", self.who()));
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        loop {
            let left = self.config.longest_step.saturating_sub(started.elapsed());
            match self.attempt(&body, left).await {
                Ok(answer) => {
                    let turn = match self.config.kind {
                        Kind::OpenAi => openai::turn_of(&answer),
                        Kind::Anthropic => anthropic::turn_of(&answer),
                    };
                    // What the model writes is recorded: a key it repeats is not.
                    return turn.map_err(|e| fail(self.config.key.scrub(&e.0))).map(|mut t| {
                        t.evidence = self.config.key.scrub(&t.evidence);
                        t.extra = self.config.key.scrub(&t.extra);
                        for (_, args) in &mut t.calls {
                            scrub_strings(args, &self.config.key);
                        }
                        t
                    });
                }
                Err(Failed::Final(why)) => return Err(fail(why)),
                Err(Failed::Again { why, after }) => {
                    if attempt >= self.config.retries {
                        return Err(fail(format!("{why} (after {} tries)", attempt + 1)));
                    }
                    let wait = match after {
                        Some(w) if w > self.config.longest_wait => {
                            return Err(fail(format!(
                                "{why}, and asked to wait {} s, longer than the {} s a step waits",
                                w.as_secs(),
                                self.config.longest_wait.as_secs()
                            )));
                        }
                        Some(w) => w,
                        None => backoff(attempt + 1),
                    };
                    if started.elapsed() + wait > self.config.longest_step {
                        return Err(fail(format!(
                            "{why}, and a step's tries may take {} s in all",
                            self.config.longest_step.as_secs()
                        )));
                    }
                    attempt += 1;
                    tracing::warn!(provider = %self.who(), %why, wait_ms = wait.as_millis(), attempt, "model call failed; trying again");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}
