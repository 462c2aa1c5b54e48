//! Owners' credentials at the gateway, in the `owner_tokens` table: an API token (`glo_`), a
//! one-time sign-in link made from one (`gll_`), and the browser session a link opened (`gls_`,
//! carried in the session cookie). Only a secret's SHA-256 is stored. A link and a session name
//! the token they came from, and a lookup checks that token too, so revoking it ends both from
//! the next request. No cache: a revocation holds on every replica at once.

use std::time::Duration;

use credentials::Scope;
use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

/// The longest an API token may live.
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(366 * 24 * 3600);
/// A sign-in link's life: long enough to open it from a terminal, short enough not to linger.
pub const LINK_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// A browser session's life, never past the token it came from.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// The three kinds of owner secret, told apart by their prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Token,
    Link,
    Session,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Self::Token => "glo_",
            Self::Link => "gll_",
            Self::Session => "gls_",
        }
    }

    fn code(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::Link => "link",
            Self::Session => "session",
        }
    }
}

/// A new secret of `kind`: its prefix and 64 hex digits of randomness.
fn new_secret(kind: Kind) -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{}{}", kind.prefix(), hex::encode(bytes))
}

/// Whether `secret` has the form of a secret of `kind` (checked before any lookup).
pub fn well_formed(secret: &str, kind: Kind) -> bool {
    secret
        .strip_prefix(kind.prefix())
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The CSRF token of a browser session: derived from the session's secret, so it needs no
/// storage, and readable only by a page of the gateway's own origin (`GET /v1/me`).
pub fn csrf_token(session_secret: &str) -> String {
    hex::encode(Sha256::digest(format!("grant-ledger csrf v1\0{session_secret}")))
}

/// The authenticated owner of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The API token behind this credential (itself, or the one the session came from): the
    /// unit that rate limits count and revocation ends.
    pub token_id: Uuid,
    pub kind: Kind,
    pub tenant: String,
    pub principal: String,
    pub scopes: Vec<Scope>,
}

impl Owner {
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// The scopes as the authorizer's `x-owner-scopes` header spells them.
    pub fn scope_header(&self) -> String {
        self.scopes.iter().map(|s| s.code()).collect::<Vec<_>>().join(",")
    }
}

/// An API token as listed, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerToken {
    pub token_id: Uuid,
    pub tenant: String,
    pub principal: String,
    pub scopes: Vec<Scope>,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnerError {
    #[error("{0}")]
    Invalid(String),
    /// The database could not be reached; a retry may succeed.
    #[error("owner tokens cannot be read now: {0}")]
    Unavailable(String),
}

fn unavailable(e: impl std::fmt::Display) -> OwnerError {
    OwnerError::Unavailable(e.to_string())
}

/// Parses scope codes (`approval.resolve,browser.grant.read`); an unknown one is refused.
pub fn parse_scopes(text: &str) -> Result<Vec<Scope>, OwnerError> {
    let mut scopes = Vec::new();
    for code in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let scope = Scope::ALL.into_iter().find(|s| s.code() == code).ok_or_else(|| {
            let known: Vec<_> = Scope::ALL.iter().map(|s| s.code()).collect();
            OwnerError::Invalid(format!("unknown scope {code:?}; the scopes are {}", known.join(", ")))
        })?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    Ok(scopes)
}

fn scopes_of(codes: &[String]) -> Vec<Scope> {
    Scope::ALL.into_iter().filter(|s| codes.iter().any(|c| c == s.code())).collect()
}

fn codes(scopes: &[Scope]) -> Vec<&'static str> {
    scopes.iter().map(|s| s.code()).collect()
}

/// Owner tokens, links and sessions in PostgreSQL.
#[derive(Debug, Clone)]
pub struct Owners {
    pool: Pool,
}

impl Owners {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, OwnerError> {
        self.pool.get().await.map_err(unavailable)
    }

    /// Makes an API token for `principal` of `tenant` with `scopes`, living `lifetime`; returns
    /// it listed and its secret, which is shown once and never stored.
    pub async fn create(
        &self,
        tenant: &str,
        principal: &str,
        scopes: &[Scope],
        lifetime: Duration,
    ) -> Result<(OwnerToken, String), OwnerError> {
        for (what, id) in [("tenant", tenant), ("principal", principal)] {
            ledger::check_entity_id(what, id).map_err(|e| OwnerError::Invalid(e.to_string()))?;
        }
        if scopes.is_empty() {
            return Err(OwnerError::Invalid("a token needs at least one scope".into()));
        }
        if lifetime.is_zero() || lifetime > MAX_TOKEN_LIFETIME {
            return Err(OwnerError::Invalid("a token lives between a second and 366 days".into()));
        }
        let secret = new_secret(Kind::Token);
        let token_id = Uuid::new_v4();
        let now = OffsetDateTime::now_utc();
        let expires_at = now + lifetime;
        self.client()
            .await?
            .execute(
                "INSERT INTO owner_tokens (token_id, kind, tenant_id, principal_id, scopes, token_sha256, created_at, \
                 expires_at) VALUES ($1, 'token', $2, $3, $4, $5, $6, $7)",
                &[&token_id, &tenant, &principal, &codes(scopes), &digest(&secret).as_slice(), &now, &expires_at],
            )
            .await
            .map_err(unavailable)?;
        let token = OwnerToken {
            token_id,
            tenant: tenant.into(),
            principal: principal.into(),
            scopes: scopes.to_vec(),
            created_at: now,
            expires_at,
            revoked_at: None,
        };
        Ok((token, secret))
    }

    /// Revokes an API token of `tenant` (and so every link and session made from it); `false`
    /// when there is none, or it was already revoked.
    pub async fn revoke(&self, tenant: &str, token_id: Uuid) -> Result<bool, OwnerError> {
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE owner_tokens SET revoked_at = now() \
                 WHERE tenant_id = $1 AND token_id = $2 AND kind = 'token' AND revoked_at IS NULL",
                &[&tenant, &token_id],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }

    /// Every API token of `tenant`, newest first.
    pub async fn list(&self, tenant: &str) -> Result<Vec<OwnerToken>, OwnerError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT token_id, tenant_id, principal_id, scopes, created_at, expires_at, revoked_at \
                 FROM owner_tokens WHERE tenant_id = $1 AND kind = 'token' ORDER BY created_at DESC, token_id",
                &[&tenant],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| OwnerToken {
                token_id: r.get(0),
                tenant: r.get(1),
                principal: r.get(2),
                scopes: scopes_of(&r.get::<_, Vec<String>>(3)),
                created_at: r.get(4),
                expires_at: r.get(5),
                revoked_at: r.get(6),
            })
            .collect())
    }

    /// A one-time sign-in link code for a usable API token of `tenant`, living [`LINK_LIFETIME`].
    pub async fn link(&self, tenant: &str, token_id: Uuid) -> Result<String, OwnerError> {
        let code = new_secret(Kind::Link);
        let n = self
            .client()
            .await?
            .execute(
                "INSERT INTO owner_tokens (token_id, kind, parent_id, tenant_id, principal_id, scopes, token_sha256, \
                 expires_at) SELECT $3, 'link', t.token_id, t.tenant_id, t.principal_id, t.scopes, $4, \
                 LEAST(now() + make_interval(secs => $5), t.expires_at) FROM owner_tokens t \
                 WHERE t.tenant_id = $1 AND t.token_id = $2 AND t.kind = 'token' AND t.revoked_at IS NULL \
                 AND t.expires_at > now()",
                &[&tenant, &token_id, &Uuid::new_v4(), &digest(&code).as_slice(), &seconds(LINK_LIFETIME)],
            )
            .await
            .map_err(unavailable)?;
        if n == 1 {
            Ok(code)
        } else {
            Err(OwnerError::Invalid(format!("tenant {tenant} has no usable token {token_id}")))
        }
    }

    /// Whom a usable sign-in link signs in (tenant, principal), spending nothing: the sign-in
    /// page says it before the owner presses the button.
    pub async fn peek_link(&self, code: &str) -> Result<Option<(String, String)>, OwnerError> {
        if !well_formed(code, Kind::Link) {
            return Ok(None);
        }
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT l.tenant_id, l.principal_id FROM owner_tokens l JOIN owner_tokens t ON t.token_id = l.parent_id \
                 WHERE l.token_sha256 = $1 AND l.kind = 'link' AND l.used_at IS NULL AND l.revoked_at IS NULL \
                 AND l.expires_at > now() AND t.revoked_at IS NULL AND t.expires_at > now()",
                &[&digest(code).as_slice()],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// Spends a sign-in link and opens a browser session in one statement: a link opens at most
    /// one session however many requests race for it. Returns the session's secret and owner,
    /// or `None` for a link that is unknown, used, expired or revoked.
    pub async fn sign_in(&self, code: &str) -> Result<Option<(String, Owner)>, OwnerError> {
        if !well_formed(code, Kind::Link) {
            return Ok(None);
        }
        let secret = new_secret(Kind::Session);
        let row = self
            .client()
            .await?
            .query_opt(
                "WITH spent AS ( \
                   UPDATE owner_tokens l SET used_at = now() FROM owner_tokens t \
                   WHERE l.token_sha256 = $1 AND l.kind = 'link' AND l.used_at IS NULL AND l.revoked_at IS NULL \
                   AND l.expires_at > now() AND t.token_id = l.parent_id AND t.revoked_at IS NULL \
                   AND t.expires_at > now() \
                   RETURNING l.parent_id, l.tenant_id, l.principal_id, l.scopes, t.expires_at AS until) \
                 INSERT INTO owner_tokens (token_id, kind, parent_id, tenant_id, principal_id, scopes, token_sha256, \
                   expires_at) \
                 SELECT $2, 'session', parent_id, tenant_id, principal_id, scopes, $3, \
                   LEAST(now() + make_interval(secs => $4), until) FROM spent \
                 RETURNING parent_id, tenant_id, principal_id, scopes",
                &[&digest(code).as_slice(), &Uuid::new_v4(), &digest(&secret).as_slice(), &seconds(SESSION_LIFETIME)],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| (secret, owner(&r, Kind::Session))))
    }

    /// The owner of a usable API token or browser session secret (never a link's).
    pub async fn find(&self, secret: &str) -> Result<Option<Owner>, OwnerError> {
        let kind = [Kind::Token, Kind::Session].into_iter().find(|k| well_formed(secret, *k));
        let Some(kind) = kind else { return Ok(None) };
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT COALESCE(s.parent_id, s.token_id), s.tenant_id, s.principal_id, s.scopes \
                 FROM owner_tokens s LEFT JOIN owner_tokens t ON t.token_id = s.parent_id \
                 WHERE s.token_sha256 = $1 AND s.kind = $2 AND s.revoked_at IS NULL AND s.expires_at > now() \
                 AND (s.parent_id IS NULL OR (t.revoked_at IS NULL AND t.expires_at > now()))",
            )
            .await
            .map_err(unavailable)?;
        let row = client.query_opt(&stmt, &[&digest(secret).as_slice(), &kind.code()]).await.map_err(unavailable)?;
        Ok(row.map(|r| owner(&r, kind)))
    }

    /// Ends a browser session (sign-out); `false` when it was not open.
    pub async fn sign_out(&self, session_secret: &str) -> Result<bool, OwnerError> {
        if !well_formed(session_secret, Kind::Session) {
            return Ok(false);
        }
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE owner_tokens SET revoked_at = now() \
                 WHERE token_sha256 = $1 AND kind = 'session' AND revoked_at IS NULL",
                &[&digest(session_secret).as_slice()],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn owner(r: &tokio_postgres::Row, kind: Kind) -> Owner {
    Owner {
        token_id: r.get(0),
        kind,
        tenant: r.get(1),
        principal: r.get(2),
        scopes: scopes_of(&r.get::<_, Vec<String>>(3)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_told_apart_by_their_prefix() {
        for kind in [Kind::Token, Kind::Link, Kind::Session] {
            let s = new_secret(kind);
            assert!(well_formed(&s, kind));
            for other in [Kind::Token, Kind::Link, Kind::Session].into_iter().filter(|k| *k != kind) {
                assert!(!well_formed(&s, other));
            }
            assert!(!well_formed(&s[..s.len() - 1], kind));
            assert!(!well_formed(&s.to_uppercase(), kind));
        }
    }

    #[test]
    fn scopes_parse_and_refuse() {
        assert_eq!(
            parse_scopes("approval.resolve, browser.grant.write,approval.resolve").unwrap(),
            vec![Scope::ApprovalResolve, Scope::GrantWrite]
        );
        assert!(parse_scopes("approval.resolve,admin").is_err());
        assert!(parse_scopes("").unwrap().is_empty());
    }

    #[test]
    fn the_csrf_token_is_the_sessions_own() {
        let (a, b) = (new_secret(Kind::Session), new_secret(Kind::Session));
        assert_eq!(csrf_token(&a), csrf_token(&a));
        assert_ne!(csrf_token(&a), csrf_token(&b));
        assert_eq!(csrf_token(&a).len(), 64);
    }
}
