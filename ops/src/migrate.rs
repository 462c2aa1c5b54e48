//! Forward-only, checksummed migrations from `migrations/`.
//!
//! A small runner rather than a library: refinery and sqlx's migrator either do not take a
//! tokio-postgres client or do not serialise two concurrent runners. This one holds a
//! transaction-scoped advisory lock for the whole run, so two `grantctl migrate` at once apply
//! each migration once, and a failure leaves nothing half-applied.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// In order; a new migration is appended here and never edited once applied anywhere.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "0001_events.sql", sql: include_str!("../../migrations/0001_events.sql") },
    Migration {
        version: 2,
        name: "0002_active_task_grants.sql",
        sql: include_str!("../../migrations/0002_active_task_grants.sql"),
    },
    Migration { version: 3, name: "0003_credentials.sql", sql: include_str!("../../migrations/0003_credentials.sql") },
    Migration { version: 4, name: "0004_projections.sql", sql: include_str!("../../migrations/0004_projections.sql") },
    Migration {
        version: 5,
        name: "0005_authority_state.sql",
        sql: include_str!("../../migrations/0005_authority_state.sql"),
    },
    Migration {
        version: 6,
        name: "0006_owner_tokens.sql",
        sql: include_str!("../../migrations/0006_owner_tokens.sql"),
    },
    Migration {
        version: 7,
        name: "0007_sessions_by_principal.sql",
        sql: include_str!("../../migrations/0007_sessions_by_principal.sql"),
    },
    Migration {
        version: 8,
        name: "0008_grants_by_tenant_and_id.sql",
        sql: include_str!("../../migrations/0008_grants_by_tenant_and_id.sql"),
    },
    Migration {
        version: 9,
        name: "0009_one_read_model.sql",
        sql: include_str!("../../migrations/0009_one_read_model.sql"),
    },
    Migration { version: 10, name: "0010_log_tree.sql", sql: include_str!("../../migrations/0010_log_tree.sql") },
    Migration {
        version: 11,
        name: "0011_bound_credentials.sql",
        sql: include_str!("../../migrations/0011_bound_credentials.sql"),
    },
    Migration { version: 12, name: "0012_open_tasks.sql", sql: include_str!("../../migrations/0012_open_tasks.sql") },
];

/// Shared by every runner of this schema: the ASCII of "grantmig".
const LOCK_KEY: i64 = 0x6772_616e_746d_6967;

pub fn checksum(sql: &str) -> String {
    hex::encode(Sha256::digest(sql.as_bytes()))
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "migration {version} ({name}) was edited after it was applied: checksum {applied} in the database, {file} now"
    )]
    Edited { version: i32, name: String, applied: String, file: String },
    #[error(
        "the database has migration {version} ({name}), which this build does not know: it is newer than this binary"
    )]
    Unknown { version: i32, name: String },
    #[error("migration {name} failed: {source}")]
    Failed { name: &'static str, source: tokio_postgres::Error },
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub applied_now: Vec<&'static str>,
    pub already: usize,
}

pub async fn run(client: &mut Client) -> Result<Report, MigrateError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version    integer PRIMARY KEY,
            name       text NOT NULL,
            checksum   text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let rows = tx.query("SELECT version, name, checksum FROM schema_migrations ORDER BY version", &[]).await?;
    let mut applied = std::collections::HashSet::new();
    for row in &rows {
        let (version, name, sum): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        let Some(m) = MIGRATIONS.iter().find(|m| m.version == version) else {
            return Err(MigrateError::Unknown { version, name });
        };
        let file = checksum(m.sql);
        if file != sum {
            return Err(MigrateError::Edited { version, name, applied: sum, file });
        }
        applied.insert(version);
    }
    let mut applied_now = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        tx.batch_execute(m.sql).await.map_err(|source| MigrateError::Failed { name: m.name, source })?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &checksum(m.sql)],
        )
        .await?;
        applied_now.push(m.name);
    }
    tx.commit().await?;
    Ok(Report { applied_now, already: applied.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_migrations_is_listed_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<_> = MIGRATIONS.iter().map(|m| m.name.to_owned()).collect();
        assert_eq!(files, listed);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i32::try_from(i).unwrap() + 1);
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
        }
    }
}
