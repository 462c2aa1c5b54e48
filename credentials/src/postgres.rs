//! Credentials in PostgreSQL's `credentials` table, secrets stored as their SHA-256 only.

use deadpool_postgres::Pool;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{AuthError, Credential, CredentialStore, Pending, Role, TOKEN_TAKEN};

#[derive(Debug, Clone)]
pub struct PgCredentials(pub Pool);

fn unavailable(e: impl std::fmt::Display) -> AuthError {
    AuthError::Unavailable(e.to_string())
}

const COLUMNS: &str = "credential_id, tenant_id, role, principal_id, expires_at, revoked_at, session_id, browser_only, start_url, browser_profile_id";

impl PgCredentials {
    async fn client(&self) -> Result<deadpool_postgres::Object, AuthError> {
        self.0.get().await.map_err(unavailable)
    }
}

impl CredentialStore for PgCredentials {
    fn insert<'a>(&'a self, token_sha256: [u8; 32], c: &'a Credential) -> Pending<'a, ()> {
        Box::pin(async move {
            self.client()
                .await?
                .execute(
                    "INSERT INTO credentials (credential_id, tenant_id, role, principal_id, token_sha256, expires_at, \
                     session_id, browser_only, start_url, browser_profile_id, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, clock_timestamp())",
                    &[
                        &c.credential_id,
                        &c.tenant,
                        &c.role.code(),
                        &c.principal,
                        &token_sha256.as_slice(),
                        &c.expires_at,
                        &c.binding.as_ref().map(|b| b.session_id.as_str()),
                        &c.binding.as_ref().is_some_and(|b| b.browser_only),
                        &c.binding.as_ref().map(|b| b.start_url.as_str()),
                        &c.binding.as_ref().map(|b| b.browser_profile_id.as_str()),
                    ],
                )
                .await
                .map_err(|e| match e.code() {
                    Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => AuthError::Invalid(TOKEN_TAKEN),
                    _ => unavailable(e),
                })?;
            Ok(())
        })
    }

    fn revoke<'a>(&'a self, tenant: &'a str, credential_id: Uuid, now: OffsetDateTime) -> Pending<'a, bool> {
        Box::pin(async move {
            let n = self
                .client()
                .await?
                .execute(
                    "UPDATE credentials SET revoked_at = $3 \
                     WHERE credential_id = $1 AND tenant_id = $2 AND revoked_at IS NULL",
                    &[&credential_id, &tenant, &now],
                )
                .await
                .map_err(unavailable)?;
            Ok(n == 1)
        })
    }

    fn list<'a>(&'a self, tenant: &'a str) -> Pending<'a, Vec<Credential>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM credentials WHERE tenant_id = $1 \
                 ORDER BY credentials.created_at DESC, credentials.credential_id"
            );
            let rows = self.client().await?.query(&sql, &[&tenant]).await.map_err(unavailable)?;
            rows.iter().map(credential).collect()
        })
    }

    fn find_id<'a>(&'a self, tenant: &'a str, credential_id: Uuid) -> Pending<'a, Option<Credential>> {
        Box::pin(async move {
            let sql = format!("SELECT {COLUMNS} FROM credentials WHERE tenant_id = $1 AND credential_id = $2");
            let row = self.client().await?.query_opt(&sql, &[&tenant, &credential_id]).await.map_err(unavailable)?;
            row.as_ref().map(credential).transpose()
        })
    }

    fn find(&self, token_sha256: [u8; 32]) -> Pending<'_, Option<Credential>> {
        Box::pin(async move {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!("SELECT {COLUMNS} FROM credentials WHERE token_sha256 = $1"))
                .await
                .map_err(unavailable)?;
            let row = client.query_opt(&stmt, &[&token_sha256.as_slice()]).await.map_err(unavailable)?;
            row.as_ref().map(credential).transpose()
        })
    }
}

fn credential(row: &tokio_postgres::Row) -> Result<Credential, AuthError> {
    let role: String = row.get(2);
    Ok(Credential {
        credential_id: row.get(0),
        tenant: row.get(1),
        role: Role::from_code(&role).ok_or_else(|| AuthError::Unavailable(format!("stored role {role:?}")))?,
        principal: row.get(3),
        expires_at: row.get(4),
        revoked_at: row.get(5),
        binding: row.get::<_, Option<String>>(6).map(|session_id| crate::Binding {
            session_id,
            browser_only: row.get(7),
            start_url: row.get(8),
            browser_profile_id: row.get(9),
        }),
    })
}
