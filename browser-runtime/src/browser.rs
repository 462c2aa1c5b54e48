//! One Chromium: a chromedriver of its own (in its own process group, so the browser it starts
//! ends with it), a fresh user-data directory, and the WebDriver session over it.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

use crate::config::BrowserConfig;

/// The flags every Chromium runs with: headless, no background traffic, no hyperlink auditing.
/// As root Chromium cannot use its sandbox and refuses to start without `--no-sandbox`, which is
/// added then only: run the runtime as an unprivileged user to keep the sandbox.
pub const FLAGS: [&str; 9] = [
    "--headless=new",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pings",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
];

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("chromedriver could not be started ({path}): {source}")]
    Spawn { path: String, source: std::io::Error },
    #[error("chromedriver did not listen within {0:?}")]
    NotReady(Duration),
    #[error("Chromium could not be started: {0}")]
    Session(String),
    #[error("the request fence could not attach to Chromium: {0}")]
    Fence(#[from] crate::fence::FenceError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug)]
pub struct Browser {
    pub client: Client,
    /// The request fence on this browser's DevTools connection: no browser runs without one.
    pub fence: crate::fence::Fence,
    process: Process,
}

/// chromedriver's process group and the profile directory, ended and removed on drop.
#[derive(Debug)]
struct Process {
    driver: tokio::process::Child,
    /// chromedriver's pid, which is its process group's id: kept, since the child forgets it
    /// once reaped.
    pid: u32,
    profile_dir: PathBuf,
}

/// Whether this process runs as root (the effective uid in /proc/self/status).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

impl Browser {
    /// Starts chromedriver and Chromium with a fresh profile; waits until the session exists.
    pub async fn start(config: &BrowserConfig) -> Result<Self, BrowserError> {
        let suffix: [u8; 8] = rand::random();
        let profile_dir = std::env::temp_dir().join(format!("grant-ledger-browser-{}", hex::encode(suffix)));
        std::fs::create_dir_all(&profile_dir)?;
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
            probe.local_addr()?.port()
        };
        let driver = tokio::process::Command::new(&config.chromedriver)
            .arg(format!("--port={port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BrowserError::Spawn { path: config.chromedriver.display().to_string(), source })?;
        let pid = driver.id().ok_or_else(|| BrowserError::Session("chromedriver exited at once".into()))?;
        let mut process = Process { driver, pid, profile_dir };
        let ready = Duration::from_secs(20);
        let deadline = tokio::time::Instant::now() + ready;
        // chromedriver takes a moment to listen; poll its port, bounded.
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            if tokio::time::Instant::now() > deadline || process.driver.try_wait()?.is_some() {
                return Err(BrowserError::NotReady(ready));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        if is_root() {
            args.push("--no-sandbox".into());
        }
        args.push(format!("--user-data-dir={}", process.profile_dir.display()));
        if !config.trusted_spki.is_empty() {
            args.push(format!("--ignore-certificate-errors-spki-list={}", config.trusted_spki.join(",")));
        }
        args.extend(config.extra_args.iter().cloned());
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("pageLoadStrategy".into(), json!("normal"));
        // A dialog stays open: the agent never dismisses one, and a command meeting it fails.
        caps.insert("unhandledPromptBehavior".into(), json!("ignore"));
        caps.insert("timeouts".into(), json!({ "script": 15000, "pageLoad": 20000, "implicit": 0 }));
        caps.insert(
            "goog:chromeOptions".into(),
            // No preloading: a prefetched or prerendered document loads in the browser itself,
            // where neither the fence nor the origin guard sees it.
            json!({
                "binary": config.chromium.display().to_string(),
                "args": args,
                "prefs": { "net": { "network_prediction_options": 2 } },
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .map_err(|e| BrowserError::Session(e.to_string()))?;
        let address = client
            .capabilities()
            .and_then(|c| c.get("goog:chromeOptions"))
            .and_then(|o| o.get("debuggerAddress"))
            .and_then(serde_json::Value::as_str)
            .ok_or(crate::fence::FenceError::NoEndpoint)?
            .to_owned();
        let fence = crate::fence::Fence::connect(&address).await?;
        // Only a tab holding the guard may load a page: its copy must be the first script there.
        if !fence.handle().guarded(1, std::time::Duration::from_secs(10)).await {
            return Err(
                crate::fence::FenceError::Endpoint("the click guard was not installed in the tab".into()).into()
            );
        }
        Ok(Self { client, fence, process })
    }

    /// The chromedriver process, whose process group holds the browser.
    pub fn driver_pid(&self) -> u32 {
        self.process.pid
    }

    /// Whether chromedriver still runs.
    pub fn driver_alive(&mut self) -> bool {
        matches!(self.process.driver.try_wait(), Ok(None))
    }

    /// Ends the WebDriver session (which closes Chromium), then everything left of the group.
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.client.clone().close()).await;
        drop(self);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The whole group: Chromium and its helpers are chromedriver's children. Once chromedriver
        // is reaped its pid may be reused, so the group is killed only while chromedriver runs or
        // a process of the group still names this session's profile.
        if matches!(self.driver.try_wait(), Ok(None)) || group_holds(self.pid, &self.profile_dir) {
            kill_group(self.pid);
        }
        let _ = std::fs::remove_dir_all(&self.profile_dir);
    }
}

/// SIGKILL to every process of group `pgid` (one this process started as a group's leader).
pub fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Whether a process of group `pgid` runs with `profile` on its command line.
fn group_holds(pgid: u32, profile: &std::path::Path) -> bool {
    let profile = profile.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: state, ppid, pgrp.
        let in_group = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(2))
            == Some(pgid.to_string().as_str());
        in_group
            && std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&profile))
    })
}

/// Whether a WebDriver error means the browser itself is gone (crashed, killed, or its tab
/// crashed): the session must restart clean.
pub fn is_crash(e: &CmdError) -> bool {
    match e {
        CmdError::Lost(_) | CmdError::Failed(_) | CmdError::FailedC(_) => true,
        CmdError::Standard(w) => {
            use fantoccini::error::ErrorStatus as S;
            let m = w.message.to_ascii_lowercase();
            matches!(w.error, S::InvalidSessionId | S::SessionNotCreated)
                || (w.error == S::UnknownError
                    && ["chrome not reachable", "disconnected", "session deleted", "tab crashed", "target crashed"]
                        .iter()
                        .any(|s| m.contains(s)))
        }
        _ => false,
    }
}
