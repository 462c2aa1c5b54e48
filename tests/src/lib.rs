//! Test support shared by the workspace's integration tests: a fresh PostgreSQL database per
//! test, migrated, from `DATABASE_URL` when set or else from a throwaway cluster started once
//! from the system's PostgreSQL binaries and shared by every test process of the run.

pub mod browser;

use std::path::PathBuf;

use anyhow::{Context, Result};
use deadpool_postgres::Pool;
use ledger::PgStore;
use uuid::Uuid;

/// The shared throwaway cluster's folder: `target/pg-test` of this workspace.
pub fn cluster_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")));
    target.join("pg-test")
}

fn server_url() -> Result<String> {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return Ok(url);
    }
    ops::pgcluster::ensure_started(&cluster_dir(), ops::pgcluster::Durability::Throwaway)
        .context("starting the test cluster (or set DATABASE_URL)")
}

/// A database of its own for one test, dropped when the value is.
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub config: tokio_postgres::Config,
    server_url: String,
}

impl TestDb {
    /// Creates and migrates a fresh database. Panics with how to get PostgreSQL when there is none.
    pub async fn new() -> Self {
        match Self::try_new().await {
            Ok(db) => db,
            Err(e) => panic!(
                "this test needs PostgreSQL: {e:#}\n\
                 Install the server (`apt-get install -y postgresql` on Debian) or set DATABASE_URL."
            ),
        }
    }

    /// A fresh database with no migration applied.
    pub async fn unmigrated() -> Self {
        Self::try_create().await.unwrap_or_else(|e| {
            panic!("{e:#}\nInstall PostgreSQL (`apt-get install -y postgresql`) or set DATABASE_URL.")
        })
    }

    async fn try_create() -> Result<Self> {
        let server_url = tokio::task::spawn_blocking(server_url).await??;
        let admin = ops::connect(&server_url).await?;
        let name = format!("gl_test_{}", Uuid::new_v4().simple());
        admin.batch_execute(&format!("CREATE DATABASE {name}")).await.context("CREATE DATABASE")?;
        let mut config: tokio_postgres::Config = server_url.parse()?;
        config.dbname(&name);
        Ok(Self { name, config, server_url })
    }

    async fn try_new() -> Result<Self> {
        let db = Self::try_create().await?;
        ops::migrate::run(&mut db.client().await).await?;
        Ok(db)
    }

    /// This database's URL, for a child process.
    pub fn url(&self) -> String {
        let base = self.server_url.split_once('?').map_or(self.server_url.as_str(), |(b, _)| b);
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        format!("{server}/{}", self.name)
    }

    /// A plain connection to this database.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) =
            self.config.connect(tokio_postgres::NoTls).await.expect("connecting to the test database");
        tokio::spawn(connection);
        client
    }

    pub fn pool(&self, size: usize) -> Pool {
        ledger::postgres::pool(self.config.clone(), size).expect("pool")
    }

    pub fn store(&self, pool_size: usize) -> PgStore {
        PgStore::new(self.pool(pool_size))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop runs outside any runtime guarantee, so use a thread with a runtime of its own.
        let (url, name) = (self.server_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let admin = ops::connect(&url).await?;
                admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await?;
                Ok::<_, anyhow::Error>(())
            })
        })
        .join();
    }
}
