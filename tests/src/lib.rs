//! Test support shared by the workspace's integration tests: a fresh PostgreSQL database per
//! test, migrated, from `DATABASE_URL` when set or else from a throwaway cluster started once
//! from the system's PostgreSQL binaries and shared by every test process of the run.

pub mod browser;
pub mod console;
pub mod fault;
pub mod gateway;
pub mod http;
pub mod lesson;
pub mod mcp;
pub mod model_stub;
pub mod platform;
pub mod replication;

/// The dispatch-ticket keyring every test service shares: a fixed key, never a deployment's.
pub const TICKET_KEYS: &str = "test 7468652074657374207375697465207469636b6574206b65793a20333220622e";

/// [`TICKET_KEYS`], parsed.
pub fn ticket_keys() -> std::sync::Arc<proto::ticket::Keyring> {
    std::sync::Arc::new(proto::ticket::Keyring::parse(TICKET_KEYS).expect("the test keyring"))
}

/// `req` as a worker sends it: its element and page moved into facts sealed as a runtime of
/// `tenant` would seal them on reading them now for `owner` in `profile`.
pub fn sealed(
    tenant: &str,
    owner: &str,
    profile: &str,
    mut req: proto::v1::AuthorizeRequest,
) -> proto::v1::AuthorizeRequest {
    let read_ms = i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or_default();
    let body = proto::v1::FactsBody {
        tenant_id: tenant.into(),
        principal_id: owner.into(),
        browser_profile_id: profile.into(),
        snapshot_id: req.snapshot_id.clone(),
        node_ref: req.node_ref.clone(),
        page_url: std::mem::take(&mut req.page_url),
        page_title: std::mem::take(&mut req.page_title),
        element: req.element.take(),
        read_ms,
    };
    req.facts = Some(ticket_keys().seal_facts(&body));
    req
}

/// [`TICKET_KEYS`] in a file of `dir`, for a service that reads TICKET_KEYS_FILE.
pub fn ticket_keys_file(dir: &std::path::Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("a folder for the keyring");
    let file = dir.join("ticket-keys");
    std::fs::write(&file, TICKET_KEYS).expect("the keyring file");
    file
}

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
        Self::create_on(server_url).await
    }

    /// A fresh, migrated database on the server(s) `server_url` names.
    pub async fn on(server_url: String) -> Self {
        let db = Self::create_on(server_url).await.expect("a database on the given server");
        ops::migrate::run(&mut db.client().await).await.expect("migrated");
        db
    }

    async fn create_on(server_url: String) -> Result<Self> {
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
        let (base, query) = self.server_url.split_once('?').unwrap_or((self.server_url.as_str(), ""));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        let query = if query.is_empty() { String::new() } else { format!("?{query}") };
        format!("{server}/{}{query}", self.name)
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

/// An append held uncommitted in a transaction of its own until [`HeldAppend::commit`]: for
/// tests of readers that must wait behind an older open transaction, and of faults at commit.
#[derive(Debug)]
pub struct HeldAppend {
    /// Where the append landed, not yet committed.
    pub outcome: ledger::AppendOutcome,
    /// The server process running the transaction.
    pub backend_pid: i32,
    go: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<ledger::postgres::Done<()>, ledger::AppendError>>,
}

impl HeldAppend {
    /// Appends `request` through [`PgStore::transaction`] and holds the transaction open.
    pub async fn start(store: &PgStore, request: ledger::AppendRequest) -> Self {
        let (staged_tx, staged_rx) = tokio::sync::oneshot::channel();
        let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
        let store = store.clone();
        let task = tokio::spawn(async move {
            store
                .transaction(tokio_postgres::IsolationLevel::ReadCommitted, async move |tx| {
                    let outcome = tx.append(&request).await?;
                    let _ = staged_tx.send((outcome, tx.backend_pid().unwrap_or(0)));
                    let _ = go_rx.await;
                    Ok(())
                })
                .await
        });
        let (outcome, backend_pid) = staged_rx.await.expect("the held append failed before it staged");
        Self { outcome, backend_pid, go, task }
    }

    /// Lets the transaction commit and returns what the ledger made of the commit.
    pub async fn commit(self) -> Result<ledger::postgres::Done<()>, ledger::AppendError> {
        let _ = self.go.send(());
        self.task.await.expect("the held append's task panicked")
    }
}

/// Typed events survive a store: appended through the catalogue, read back and decoded equal,
/// their chain intact. Run against each store by the tests that own one.
pub async fn typed_events_round_trip<S: ledger::EventStore>(store: &S) {
    use grant_domain::catalogue::{ApprovalExpired, Event, SessionCreated, Surface};
    use ledger::{AppendRequest, ExpectedVersion, Metadata, StreamId, TenantId};

    let s = StreamId::new(format!("session-tenant-a.{}", Uuid::new_v4().simple())).expect("stream id");
    let created = Event::SessionCreated(SessionCreated {
        session_id: "s-1".into(),
        tenant_id: "tenant-a".into(),
        principal_id: "owner-1".into(),
        browser_profile_id: Some("profile-1".into()),
        schedule_id: None,
        surface: Surface::Interactive,
    });
    let expired = Event::ApprovalExpired(ApprovalExpired { approval_id: Uuid::new_v4() });
    let new = vec![
        created.to_new(Uuid::new_v4(), Metadata::by("owner-1")),
        expired.to_new(Uuid::new_v4(), Metadata::by("sweeper")),
    ];
    let tenant = TenantId::new("tenant-a").expect("tenant id");
    store.append(AppendRequest::single(tenant, s.clone(), ExpectedVersion::NoStream, new)).await.unwrap();
    let read = store.read_stream(&s, 1).await.unwrap();
    let decoded: Vec<_> = read.iter().map(|e| Event::from_recorded(e).unwrap()).collect();
    assert_eq!(decoded, [created, expired]);
    ledger::verify_stream(&s, &read).expect("chain over typed payloads");
}

/// Polls `check` until it answers `Some`, every `every`, and fails the test naming `what` if
/// `within` passes first: the one wait-for-a-condition loop of the tests (no sleep stands in
/// for a condition).
pub async fn poll_until<T, F, Fut>(
    what: &str,
    within: std::time::Duration,
    every: std::time::Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(every).await;
    }
}

/// Every scope an owner may hold, as the gateway names them.
pub const ALL_OWNER_SCOPES: &str = "approval.resolve,browser.grant.read,browser.grant.write";

/// `message` with `token` as its bearer credential: the one way the tests authenticate a call.
pub fn bearer<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("an ASCII token"));
    req
}

/// `message` sent by the gateway (`token`) for `owner`, with every owner scope.
pub fn as_owner<T>(token: &str, owner: &str, message: T) -> tonic::Request<T> {
    let mut req = bearer(token, message);
    req.metadata_mut().insert("x-principal-id", owner.parse().expect("an ASCII owner id"));
    req.metadata_mut().insert("x-owner-scopes", ALL_OWNER_SCOPES.parse().expect("ASCII scopes"));
    req
}

/// `grantctl`, as `scripts/test` builds it before the tests (or the one `GRANTCTL` names).
pub fn grantctl() -> std::path::PathBuf {
    if let Some(bin) = std::env::var_os("GRANTCTL") {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("the test's path");
    let bin = exe.parent().and_then(|deps| deps.parent()).expect("target/debug").join("grantctl");
    assert!(bin.exists(), "{} is missing: cargo build -p ops --bin grantctl (scripts/test builds it)", bin.display());
    bin
}

/// The pids of `parent`'s children, forked by any of its threads.
pub fn children(parent: u32) -> Vec<u32> {
    let tasks =
        std::fs::read_dir(format!("/proc/{parent}/task")).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default();
    tasks
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}
