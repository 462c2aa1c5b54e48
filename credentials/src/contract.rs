//! The credential store's contract, for every `CredentialStore`: run against the memory model and
//! PostgreSQL alike. Each case uses tenants of its own, so one database serves the whole suite.
#![allow(clippy::missing_panics_doc)] // a contract case is an assertion

use time::{Duration, OffsetDateTime};
use tonic::metadata::MetadataMap;
use uuid::Uuid;

use crate::{AuthError, Credentials, Role, new_token};

/// Every case.
pub async fn run_all(credentials: &Credentials) {
    a_registered_credential_authenticates_as_its_principal(credentials).await;
    a_tenants_list_is_its_own_newest_first(credentials).await;
    a_revocation_is_once_and_in_its_tenant_only(credentials).await;
    an_expired_credential_does_not_authenticate(credentials).await;
    a_token_registered_twice_is_refused(credentials).await;
    a_credential_is_usable_by_id_in_its_tenant_only(credentials).await;
}

pub async fn a_credential_is_usable_by_id_in_its_tenant_only(credentials: &Credentials) {
    let tenant = fresh_tenant();
    let c = credentials.register(&new_token(), &tenant, Role::Operator, None, None).await.expect("registered");
    assert_eq!(credentials.usable(&tenant, c.credential_id).await, Ok(true));
    assert_eq!(credentials.usable(&fresh_tenant(), c.credential_id).await, Ok(false), "another tenant's");
    assert_eq!(credentials.usable(&tenant, Uuid::new_v4()).await, Ok(false), "none");
    credentials.revoke(&tenant, c.credential_id).await.expect("revoked");
    assert_eq!(credentials.usable(&tenant, c.credential_id).await, Ok(false), "revoked");
}

/// A tenant no other case uses.
pub fn fresh_tenant() -> String {
    format!("contract-{}", Uuid::new_v4().simple())
}

fn bearer(token: &str) -> MetadataMap {
    let mut m = MetadataMap::new();
    m.insert("authorization", format!("Bearer {token}").parse().expect("an ASCII header"));
    m
}

async fn authenticate(credentials: &Credentials, token: &str) -> Result<String, AuthError> {
    let caller = credentials.authenticate(&bearer(token), &Role::ALL, &[], OffsetDateTime::now_utc()).await?;
    Ok(caller.principal)
}

pub async fn a_registered_credential_authenticates_as_its_principal(credentials: &Credentials) {
    let tenant = fresh_tenant();
    let token = new_token();
    let c = credentials.register(&token, &tenant, Role::Worker, Some("owner-1"), None).await.expect("registered");
    assert_eq!((c.tenant.as_str(), c.principal.as_deref()), (tenant.as_str(), Some("owner-1")));
    assert_eq!(authenticate(credentials, &token).await, Ok("owner-1".to_owned()));
    let unknown = authenticate(credentials, &new_token()).await;
    assert!(matches!(unknown, Err(AuthError::Unauthenticated(_))), "{unknown:?}");
}

pub async fn a_tenants_list_is_its_own_newest_first(credentials: &Credentials) {
    let (tenant, other) = (fresh_tenant(), fresh_tenant());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let c = credentials.register(&new_token(), &tenant, Role::Operator, None, None).await.expect("registered");
        ids.push(c.credential_id);
    }
    credentials.register(&new_token(), &other, Role::Operator, None, None).await.expect("registered");
    ids.reverse();
    let listed: Vec<Uuid> = credentials.list(&tenant).await.expect("listed").iter().map(|c| c.credential_id).collect();
    assert_eq!(listed, ids, "the tenant's own credentials, newest first");
}

pub async fn a_revocation_is_once_and_in_its_tenant_only(credentials: &Credentials) {
    let tenant = fresh_tenant();
    let token = new_token();
    let c = credentials.register(&token, &tenant, Role::Operator, None, None).await.expect("registered");
    assert_eq!(credentials.revoke(&fresh_tenant(), c.credential_id).await, Ok(false), "another tenant's");
    assert!(authenticate(credentials, &token).await.is_ok(), "still usable");
    assert_eq!(credentials.revoke(&tenant, c.credential_id).await, Ok(true));
    assert_eq!(credentials.revoke(&tenant, c.credential_id).await, Ok(false), "revoked once");
    assert!(matches!(authenticate(credentials, &token).await, Err(AuthError::Unauthenticated(_))));
    let listed = credentials.list(&tenant).await.expect("listed");
    assert!(listed.len() == 1 && listed[0].revoked_at.is_some(), "{listed:?}");
}

pub async fn an_expired_credential_does_not_authenticate(credentials: &Credentials) {
    let tenant = fresh_tenant();
    let (past, future) = (new_token(), new_token());
    let now = OffsetDateTime::now_utc();
    credentials.register(&past, &tenant, Role::Operator, None, Some(now - Duration::seconds(1))).await.expect("ok");
    credentials.register(&future, &tenant, Role::Operator, None, Some(now + Duration::hours(1))).await.expect("ok");
    assert!(matches!(authenticate(credentials, &past).await, Err(AuthError::Unauthenticated(_))));
    assert!(authenticate(credentials, &future).await.is_ok());
}

pub async fn a_token_registered_twice_is_refused(credentials: &Credentials) {
    let (tenant, token) = (fresh_tenant(), new_token());
    let first = credentials.register(&token, &tenant, Role::Worker, Some("owner-1"), None).await.expect("registered");
    let again = credentials.register(&token, &fresh_tenant(), Role::Operator, None, None).await;
    assert!(matches!(again, Err(AuthError::Invalid(_))), "{again:?}");
    let caller = credentials.authenticate(&bearer(&token), &Role::ALL, &[], OffsetDateTime::now_utc()).await;
    assert_eq!(caller.map(|c| (c.tenant, c.principal)), Ok((first.tenant, "owner-1".to_owned())), "the first stands");
}
