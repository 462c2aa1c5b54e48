//! A primary and its synchronous streaming standby, from the system's PostgreSQL binaries: the
//! one place the kit runs clusters of its own rather than the shared one, since a test kills
//! this primary and promotes the standby.

use std::path::PathBuf;
use std::time::Duration;

use crate::TestDb;

/// Both servers, stopped and wiped when dropped.
#[derive(Debug)]
pub struct Pair {
    dir: PathBuf,
    pub primary_port: u16,
    pub standby_port: u16,
}

impl Pair {
    /// Started, with the standby streaming and acknowledging every commit.
    pub async fn start() -> Self {
        let dir = crate::cluster_dir().with_file_name(format!("pg-pair-{}", uuid::Uuid::new_v4().simple()));
        let made = dir.clone();
        let (primary_port, standby_port) = tokio::task::spawn_blocking(move || ops::pgcluster::start_replicated(&made))
            .await
            .unwrap()
            .unwrap_or_else(|e| {
                panic!("{e:#}\nThis test runs PostgreSQL's own binaries: `apt-get install -y postgresql` on Debian.")
            });
        let pair = Self { dir, primary_port, standby_port };
        let primary = format!("postgres://postgres@127.0.0.1:{primary_port}/postgres");
        crate::poll_until(
            "the standby to stream synchronously",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || {
                let primary = primary.clone();
                async move {
                    let client = ops::connect(&primary).await.ok()?;
                    let sync = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'";
                    let n: i64 = client.query_one(sync, &[]).await.ok()?.get(0);
                    (n > 0).then_some(())
                }
            },
        )
        .await;
        pair
    }

    /// Both servers, writes going to whichever takes them: how every service is configured.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary_port, self.standby_port
        )
    }

    /// A fresh, migrated database on the pair.
    pub async fn db(&self) -> TestDb {
        TestDb::on(self.url()).await
    }

    /// Cuts the standby off (its WAL sender ended, its primary pointed nowhere), and waits
    /// until the primary has written WAL the standby never received: from here, a commit the
    /// primary alone acknowledged is one a failover loses.
    pub async fn cut_standby(&self) {
        let primary = ops::connect(&format!("postgres://postgres@127.0.0.1:{}/postgres", self.primary_port))
            .await
            .expect("the primary");
        let standby = ops::connect(&format!("postgres://postgres@127.0.0.1:{}/postgres", self.standby_port))
            .await
            .expect("the standby");
        // Pointed nowhere first, so that it cannot stream again once cut.
        for sql in
            ["ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 user=postgres'", "SELECT pg_reload_conf()"]
        {
            standby.batch_execute(sql).await.expect("the standby pointed nowhere");
        }
        primary.batch_execute("SELECT pg_terminate_backend(pid) FROM pg_stat_replication").await.expect("cut");
        crate::poll_until(
            "the primary to write past the standby",
            Duration::from_secs(30),
            Duration::from_millis(5),
            || {
                let (primary, standby) = (&primary, &standby);
                async move {
                    let received: String =
                        standby.query_one("SELECT pg_last_wal_receive_lsn()::text", &[]).await.ok()?.get(0);
                    let ahead = "SELECT pg_current_wal_lsn() > $1::text::pg_lsn";
                    primary.query_one(ahead, &[&received]).await.ok()?.get::<_, bool>(0).then_some(())
                }
            },
        )
        .await;
    }

    /// SIGKILL to the primary's server.
    pub async fn kill_primary(&self) {
        let dir = self.dir.join("primary");
        tokio::task::spawn_blocking(move || ops::pgcluster::kill(&dir)).await.unwrap().expect("the primary killed");
    }

    /// The standby promoted: it takes writes when this returns.
    pub async fn promote(&self) {
        let dir = self.dir.join("standby");
        tokio::task::spawn_blocking(move || ops::pgcluster::promote(&dir))
            .await
            .unwrap()
            .expect("the standby promoted");
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for node in ["primary", "standby"] {
            let _ = ops::pgcluster::stop_now(&self.dir.join(node));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
