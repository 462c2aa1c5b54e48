//! Operations: the `grantctl` command's pieces (migrations, the local PostgreSQL cluster, the
//! services, settings, audits, the classifier's JSON-lines front end). Benchmarks are the `bench`
//! crate's. This crate may use every other crate of the workspace; none may use it
//! except `bench` and `tests`.

pub mod agent;
pub mod audit;
pub mod authority;
pub mod check;
pub mod classify;
pub mod demo;
pub mod migrate;
pub mod observe;
pub mod pgcluster;
pub mod proof;
pub mod rejudge;
pub mod serve;
pub mod settings;
pub mod status;
pub mod tls;
pub mod worker;

use anyhow::{Context, Result};

/// A binary's `main`: `work` on a multi-threaded runtime; an error printed with its chain, after
/// `name`, and the exit status failed.
pub fn run_main(name: &str, work: impl std::future::Future<Output = Result<()>>) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Connects one client and drives its connection in the background.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
    connect_config(&config).await.with_context(|| format!("connecting to PostgreSQL at {}", redact(url)))
}

/// [`connect`] from a parsed configuration.
pub async fn connect_config(config: &tokio_postgres::Config) -> Result<tokio_postgres::Client> {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.context("connecting to PostgreSQL")?;
    tokio::spawn(connection);
    Ok(client)
}

/// A URL fit for a log line: the password replaced.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') { format!("{}{user}:***{}", &url[..s + 3], &url[at..]) } else { url.to_owned() }
        }
        _ => url.to_owned(),
    }
}

/// The whole log in the global read's order, a page at a time (audit replay and the authority
/// check both fold it).
/// [`each_page`] until the read has passed every event stored when it began: the gap-safe read
/// lags while any older transaction in the cluster is open, and a verifier or a re-judge that
/// stopped there would report a log shorter than it is. Gives up after 30 s, saying why.
pub(crate) async fn each_page_all(
    store: &ledger::PgStore,
    mut f: impl FnMut(&[ledger::RecordedEvent]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let client = store.pool().get().await?;
    let stored: i64 = client.query_one("SELECT count(*) FROM events", &[]).await?.get(0);
    drop(client);
    let stored = u64::try_from(stored)?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let (mut at, mut read) = (ledger::Checkpoint::START, 0u64);
    loop {
        let page = ledger::EventStore::read_all(store, at, ledger::READ_PAGE).await?;
        let Some(last) = page.last() else {
            if read >= stored {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "the log's read is held back at {read} of {stored} events by a transaction still open in the \
                     cluster (see pg_stat_activity)"
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        at = last.checkpoint();
        read += page.len() as u64;
        f(&page)?;
    }
}

pub(crate) async fn each_page(
    store: &ledger::PgStore,
    mut f: impl FnMut(&[ledger::RecordedEvent]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut at = ledger::Checkpoint::START;
    loop {
        let page = ledger::EventStore::read_all(store, at, ledger::READ_PAGE).await?;
        let Some(last) = page.last() else { return Ok(()) };
        at = last.checkpoint();
        f(&page)?;
    }
}
