//! A synthetic HTTPS site on loopback for tests and benchmarks: realistic host names served by
//! one listener under a throwaway CA, pages set by the test, and a log of every request the
//! browser made. Chromium reaches it through a host-resolver rule that maps the fixture's hosts
//! to the listener and every other host to nothing, and trusts it through the CA bundle the
//! runtime is configured with, the same path a deployment's inspecting proxy would use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// One request the browser made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    pub host: String,
    /// Path and query, as sent.
    pub target: String,
    pub body: String,
    /// The `Sec-Fetch-Dest` header: `document`, `iframe`, `image`…
    pub dest: String,
    /// When its head was read.
    pub at: std::time::Instant,
}

impl Logged {
    /// The path without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

type Pages = Arc<Mutex<HashMap<(String, String), String>>>;

/// The running site; it stops when dropped.
#[derive(Debug)]
pub struct Fixture {
    pub port: u16,
    pub hosts: Vec<String>,
    /// The CA bundle (PEM) to configure as BROWSER_CA_BUNDLE.
    pub ca_bundle: PathBuf,
    pages: Pages,
    log: Arc<Mutex<Vec<Logged>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A TLS acceptor for `hosts` (names or IP addresses) under a throwaway CA made for it, and the
/// CA's certificate (PEM) a client is told to trust.
pub fn tls(hosts: &[&str]) -> std::io::Result<(TlsAcceptor, String)> {
    let fail = |e: rcgen::Error| std::io::Error::other(e.to_string());
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "grant-ledger fixture CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(fail)?).map_err(fail)?;
    let key = KeyPair::generate().map_err(fail)?;
    let leaf = CertificateParams::new(hosts.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())
        .map_err(fail)?
        .signed_by(&key, &ca)
        .map_err(fail)?;
    // The chain carries the CA, whose key the client is told to trust.
    let chain = vec![CertificateDer::from(leaf.der().to_vec()), CertificateDer::from(ca.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(std::io::Error::other)?;
    Ok((TlsAcceptor::from(Arc::new(config)), ca.pem()))
}

impl Fixture {
    /// Serves `hosts` (each reachable as `https://host`) on a loopback port; the CA goes to
    /// `dir/fixture-ca.pem`.
    pub async fn start(hosts: &[&str], dir: &Path) -> std::io::Result<Self> {
        let (acceptor, ca_pem) = tls(hosts)?;
        std::fs::create_dir_all(dir)?;
        let ca_bundle = dir.join("fixture-ca.pem");
        std::fs::write(&ca_bundle, ca_pem)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let pages: Pages = Arc::default();
        let log: Arc<Mutex<Vec<Logged>>> = Arc::default();
        let task = {
            let (pages, log) = (Arc::clone(&pages), Arc::clone(&log));
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, pages, log) = (acceptor.clone(), Arc::clone(&pages), Arc::clone(&log));
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            let _ = serve(tls, &pages, &log).await;
                        }
                    });
                }
            })
        };
        Ok(Self { port, hosts: hosts.iter().map(|h| (*h).to_owned()).collect(), ca_bundle, pages, log, task })
    }

    /// Serves `html` at `host` and `path`; `redirect:<url>` redirects there instead (302), and
    /// `redirect307:<url>` too, keeping the method and body.
    pub fn page(&self, host: &str, path: &str, html: &str) {
        lock(&self.pages).insert((host.to_owned(), path.to_owned()), html.to_owned());
    }

    /// The host-resolver rule for BROWSER_EXTRA_ARGS: the fixture's hosts, and nothing else.
    pub fn resolver_rule(&self) -> String {
        let maps: Vec<String> = self.hosts.iter().map(|h| format!("MAP {h}:443 127.0.0.1:{}", self.port)).collect();
        format!("--host-resolver-rules={}, MAP * ~NOTFOUND", maps.join(", "))
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        lock(&self.log).clone()
    }

    /// Forgets the requests so far.
    pub fn clear(&self) {
        lock(&self.log).clear();
    }
}

/// One connection: requests until the browser closes it.
async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut io: S,
    pages: &Pages,
    log: &Mutex<Vec<Logged>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await?;
            if n == 0 || buf.len() > 1 << 20 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or_default().split(' ');
        let (method, target) =
            (first.next().unwrap_or_default().to_owned(), first.next().unwrap_or_default().to_owned());
        let mut headers = HashMap::new();
        for line in lines {
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
        buf.drain(..head_end + length);
        let host = headers.get("host").map(|h| h.split(':').next().unwrap_or_default().to_owned()).unwrap_or_default();
        let entry = Logged {
            method,
            host: host.clone(),
            target: target.clone(),
            body,
            dest: headers.get("sec-fetch-dest").cloned().unwrap_or_default(),
            at: std::time::Instant::now(),
        };
        let page = lock(pages).get(&(host, entry.path().to_owned())).cloned();
        lock(log).push(entry);
        // A page set as `redirect:<url>` answers with a redirect there.
        let (status, location, body) = match page {
            Some(html) => match (html.strip_prefix("redirect:"), html.strip_prefix("redirect307:")) {
                (Some(to), _) => ("302 Found", format!("Location: {to}\r\n"), String::new()),
                (_, Some(to)) => ("307 Temporary Redirect", format!("Location: {to}\r\n"), String::new()),
                _ => ("200 OK", String::new(), html),
            },
            None => ("404 Not Found", String::new(), "<!doctype html><title>Not found</title><p>Not found".to_owned()),
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\n{location}Content-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        io.write_all(reply.as_bytes()).await?;
        io.flush().await?;
    }
}
