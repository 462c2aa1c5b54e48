//! Everything the runtime reads from its environment, parsed once at start-up. Each refusal
//! names the variable and the rule. A test suite from outside points the runtime at its own
//! fixture site through these alone: extra Chromium arguments (a host-resolver rule) and a CA
//! bundle to trust.

use std::path::PathBuf;

use base64::Engine;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(message.into()))
}

/// How one Chromium is started.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    pub chromedriver: PathBuf,
    pub chromium: PathBuf,
    /// Appended after the runtime's own flags.
    pub extra_args: Vec<String>,
    /// Base64 SHA-256 of each trusted certificate's public key (from BROWSER_CA_BUNDLE).
    pub trusted_spki: Vec<String>,
}

/// Where approval tokens are redeemed.
#[derive(Debug, Clone)]
pub struct AuthorizerLink {
    /// `https://host:port`, or `http://127.0.0.1:port` for local development.
    pub url: String,
    /// PEM of the CA that signed the authorizer's certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// The runtime's own `runtime` credential.
    pub token: String,
}

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub browser: BrowserConfig,
    /// At most this many Chromium processes at once.
    pub pool_size: usize,
    /// The longest one call may wait on the browser: a page whose script hangs the renderer
    /// gets its browser restarted clean (BROWSER_CALL_TIMEOUT_SECONDS, default 30).
    pub call_timeout: std::time::Duration,
    /// A session no call has used for this long is closed and its browser given back to the pool:
    /// a worker that never closed it, or an owner who took a tab over and walked away
    /// (BROWSER_IDLE_SECONDS, default 1800).
    pub idle: std::time::Duration,
    pub authorizer: Option<AuthorizerLink>,
    /// Task records: `<dir>/<tenant>/<owner>/<run id>.json`, an object of field id to value.
    pub records_dir: PathBuf,
    /// The keys dispatch tickets are checked with (TICKET_KEYS_FILE, shared with the authorizer).
    pub tickets: std::sync::Arc<proto::ticket::Keyring>,
}

/// Flags an operator may not pass: each would undo a guard the runtime relies on.
const REFUSED_FLAGS: [&str; 6] = [
    "--user-data-dir",
    "--ignore-certificate-errors",
    "--disable-web-security",
    "--remote-debugging-port",
    "--remote-debugging-pipe",
    "--enable-pings",
];

impl RuntimeConfig {
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let path = |var: &str, default: &str| PathBuf::from(get(var).unwrap_or_else(|| default.to_owned()));
        let chromedriver = path("BROWSER_CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = path("BROWSER_CHROMIUM", "/usr/bin/chromium");
        for (var, p) in [("BROWSER_CHROMEDRIVER", &chromedriver), ("BROWSER_CHROMIUM", &chromium)] {
            if !p.is_file() {
                return refuse(format!(
                    "{var}={}: no such file (install Debian's chromium and chromium-driver packages)",
                    p.display()
                ));
            }
        }
        let extra_args = match get("BROWSER_EXTRA_ARGS") {
            None => Vec::new(),
            Some(json) => parse_extra_args(&json)?,
        };
        let trusted_spki = match get("BROWSER_CA_BUNDLE") {
            None => Vec::new(),
            Some(file) => {
                let pem = std::fs::read_to_string(&file)
                    .map_err(|e| ConfigError(format!("BROWSER_CA_BUNDLE={file:?} cannot be read: {e}")))?;
                spki_hashes(&pem).map_err(|e| ConfigError(format!("BROWSER_CA_BUNDLE={file:?}: {e}")))?
            }
        };
        let pool = get("BROWSER_POOL_SIZE").unwrap_or_else(|| "4".into());
        let pool_size: usize =
            pool.parse().map_err(|_| ConfigError(format!("BROWSER_POOL_SIZE={pool:?} is not a whole number")))?;
        if !(1..=64).contains(&pool_size) {
            return refuse(format!("BROWSER_POOL_SIZE={pool_size} must be between 1 and 64"));
        }
        let timeout = get("BROWSER_CALL_TIMEOUT_SECONDS").unwrap_or_else(|| "30".into());
        let seconds: u64 = timeout
            .parse()
            .map_err(|_| ConfigError(format!("BROWSER_CALL_TIMEOUT_SECONDS={timeout:?} is not a whole number")))?;
        if !(1..=600).contains(&seconds) {
            return refuse(format!("BROWSER_CALL_TIMEOUT_SECONDS={seconds} must be between 1 and 600"));
        }
        let idle = get("BROWSER_IDLE_SECONDS").unwrap_or_else(|| "1800".into());
        let idle: u64 =
            idle.parse().map_err(|_| ConfigError(format!("BROWSER_IDLE_SECONDS={idle:?} is not a whole number")))?;
        if !(1..=86_400).contains(&idle) {
            return refuse(format!("BROWSER_IDLE_SECONDS={idle} must be between 1 and 86400"));
        }
        let authorizer = match (get("RUNTIME_AUTHORIZER_URL"), get("RUNTIME_AUTHORIZER_TOKEN")) {
            (None, None) => None,
            (Some(url), Some(token)) => {
                if !authorizer_url_ok(&url) {
                    return refuse(format!(
                        "RUNTIME_AUTHORIZER_URL={url:?} must be https://host:port, or http:// on a loopback address only"
                    ));
                }
                let ca_pem = match get("RUNTIME_AUTHORIZER_CA") {
                    None => None,
                    Some(file) => Some(
                        std::fs::read(&file)
                            .map_err(|e| ConfigError(format!("RUNTIME_AUTHORIZER_CA={file:?} cannot be read: {e}")))?,
                    ),
                };
                Some(AuthorizerLink { url, ca_pem, token })
            }
            _ => return refuse("RUNTIME_AUTHORIZER_URL and RUNTIME_AUTHORIZER_TOKEN are set together"),
        };
        let records_dir = path("TASK_RECORDS_DIR", "/var/lib/grant-ledger/records");
        let tickets = std::sync::Arc::new(proto::ticket::Keyring::from_env(&get).map_err(ConfigError)?);
        Ok(Self {
            browser: BrowserConfig { chromedriver, chromium, extra_args, trusted_spki },
            pool_size,
            call_timeout: std::time::Duration::from_secs(seconds),
            idle: std::time::Duration::from_secs(idle),
            authorizer,
            records_dir,
            tickets,
        })
    }
}

/// BROWSER_EXTRA_ARGS is a JSON array of flags, since a flag such as a host-resolver rule holds
/// spaces and commas.
fn parse_extra_args(json: &str) -> Result<Vec<String>, ConfigError> {
    let args: Vec<String> = serde_json::from_str(json)
        .map_err(|e| ConfigError(format!("BROWSER_EXTRA_ARGS is not a JSON array of strings: {e}")))?;
    for arg in &args {
        if !arg.starts_with("--") {
            return refuse(format!("BROWSER_EXTRA_ARGS: {arg:?} is not a --flag"));
        }
        let name = arg.split('=').next().unwrap_or(arg);
        if REFUSED_FLAGS.contains(&name) {
            return refuse(format!("BROWSER_EXTRA_ARGS: {name} would undo a guard of the runtime"));
        }
    }
    Ok(args)
}

/// The base64 SHA-256 of each certificate's SubjectPublicKeyInfo, the form Chromium's
/// `--ignore-certificate-errors-spki-list` takes. Chromium accepts a chain that holds one of
/// these keys, so the bundle's CA must be in the chain the server presents.
pub fn spki_hashes(pem: &str) -> Result<Vec<String>, String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let end = body.find(END).ok_or("a certificate has no END line")?;
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("bad base64: {e}"))?;
        let spki = spki_of(&der).ok_or("a certificate is not DER X.509")?;
        out.push(base64::engine::general_purpose::STANDARD.encode(Sha256::digest(spki)));
        rest = &body[end + END.len()..];
    }
    if out.is_empty() {
        return Err("no certificate found".into());
    }
    Ok(out)
}

/// One DER tag-length-value: (tag, whole encoding, content, rest).
type Tlv<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

fn tlv(d: &[u8]) -> Option<Tlv<'_>> {
    let tag = *d.first()?;
    let first = *d.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*d.get(2 + i)?);
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    if end > d.len() {
        return None;
    }
    Some((tag, &d[..end], &d[header..end], &d[end..]))
}

/// The SubjectPublicKeyInfo of a certificate: the seventh field of the TBS certificate when the
/// explicit version is present, the sixth when it is not.
fn spki_of(der: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    let (tag, _, cert, _) = tlv(der)?;
    let (tbs_tag, _, tbs, _) = tlv(cert)?;
    if tag != SEQUENCE || tbs_tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    if tbs.first() == Some(&0xa0) {
        rest = tlv(rest)?.3;
    }
    // serial number, signature algorithm, issuer, validity, subject
    for _ in 0..5 {
        rest = tlv(rest)?.3;
    }
    let (tag, whole, _, _) = tlv(rest)?;
    (tag == SEQUENCE).then_some(whole)
}

/// `https://host:port`, or plain `http://` to a loopback address; never a URL with user info
/// (`http://127.0.0.1:1@elsewhere` names another host). Parsed, not matched by prefix.
fn authorizer_url_ok(url: &str) -> bool {
    let Ok(parsed) = url.parse::<tonic::transport::Uri>() else { return false };
    let Some(authority) = parsed.authority() else { return false };
    if authority.as_str().contains('@') {
        return false;
    }
    let loopback = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme_str() {
        Some("https") => true,
        Some("http") => loopback,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_args_are_json_flags_and_guards_stay() {
        let ok = parse_extra_args(r#"["--host-resolver-rules=MAP a.test 127.0.0.1, MAP * ~NOTFOUND"]"#).unwrap();
        assert_eq!(ok.len(), 1);
        assert!(parse_extra_args("--a --b").is_err(), "not JSON");
        assert!(parse_extra_args(r#"["x"]"#).is_err(), "not a flag");
        assert!(parse_extra_args(r#"["--user-data-dir=/tmp/x"]"#).is_err());
        assert!(parse_extra_args(r#"["--ignore-certificate-errors"]"#).is_err());
        assert!(parse_extra_args(r#"["--ignore-certificate-errors-spki-list=abc"]"#).is_ok());
    }

    #[test]
    fn the_authorizer_is_reached_over_tls_or_on_loopback_alone() {
        for ok in ["https://authz.example:443", "http://127.0.0.1:50051", "http://[::1]:50051"] {
            assert!(authorizer_url_ok(ok), "{ok}");
        }
        for bad in
            ["http://127.0.0.1:1@evil.test:80", "https://user@authz.example", "http://authz.example:80", "ftp://x"]
        {
            assert!(!authorizer_url_ok(bad), "{bad}");
        }
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(spki_hashes("").is_err());
        assert!(spki_hashes("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }
}

#[cfg(test)]
mod spki {
    use super::*;
    use rcgen::{CertificateParams, KeyPair, PublicKeyData};

    #[test]
    fn the_hash_is_of_the_certificates_public_key() {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["www.lesson.test".to_owned()]).unwrap().self_signed(&key).unwrap();
        let want = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(key.subject_public_key_info()));
        assert_eq!(spki_hashes(&cert.pem()).unwrap(), vec![want.clone()]);
        let two = format!("{}{}", cert.pem(), cert.pem());
        assert_eq!(spki_hashes(&two).unwrap(), vec![want.clone(), want]);
    }
}
