//! The authorizer's inline state, read for operators: checked against each tenant's log folded in
//! memory (`grantctl projections verify`), and the profiles no owner was recorded for
//! (`grantctl profiles unclaimed`).

use anyhow::Result;
use ledger::PgStore;

use crate::each_page;

/// The authorizer's inline state (sessions, profiles, settings, approvals, grants, run
/// snapshots) against each tenant's log folded in memory. Run it when the tenant is quiet: the
/// log and the tables are read one after the other, so a write in between shows as a difference.
pub async fn authority_verify(config: &tokio_postgres::Config) -> Result<(bool, String)> {
    // The log and the tables are read one after the other: a write in between shows as a
    // difference, so a difference is looked at again before it is reported.
    // The log is read gap-safely, so an open transaction anywhere in the cluster holds the read
    // back: a fold that saw fewer events than were committed when it began is read again
    // (bounded), not reported as a difference.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut said = (false, String::new());
    let mut differed = 0;
    while differed < 3 {
        let (ok, text, lagged) = authority_verify_once(config).await?;
        said = (ok, text);
        if ok {
            break;
        }
        if lagged && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        differed += 1;
    }
    Ok(said)
}

/// One comparison, and whether the fold read fewer events than were committed when it began.
async fn authority_verify_once(config: &tokio_postgres::Config) -> Result<(bool, String, bool)> {
    use authorizer::domain::World;
    let store = PgStore::new(ledger::postgres::pool(config.clone(), 2).map_err(anyhow::Error::msg)?);
    let committed: i64 =
        crate::connect_config(config).await?.query_one("SELECT count(*) FROM events", &[]).await?.get(0);
    let mut read = 0i64;
    let mut folded: std::collections::BTreeMap<String, World> = std::collections::BTreeMap::new();
    each_page(&store, |page| {
        read += i64::try_from(page.len()).unwrap_or(i64::MAX);
        for e in page {
            let event = grant_domain::catalogue::Event::from_recorded(e)?;
            folded.entry(e.tenant_id.to_string()).or_default().apply(&event);
        }
        Ok(())
    })
    .await?;
    // Tenants with inline rows but no events are compared too (with nothing).
    let client = crate::connect_config(config).await?;
    let stored_tenants = client
        .query(
            "SELECT tenant_id FROM authority_sessions UNION SELECT tenant_id FROM authority_profiles WHERE version > 0 \
             UNION SELECT tenant_id FROM authority_settings WHERE version > 0 UNION SELECT tenant_id FROM \
             authority_approvals UNION SELECT tenant_id FROM active_task_grants UNION SELECT tenant_id FROM run_snapshots",
            &[],
        )
        .await?;
    for r in stored_tenants {
        folded.entry(r.get(0)).or_default();
    }
    let grants = authorizer::PgGrants::new(store);
    let mut out = Vec::new();
    let mut ok = true;
    for (tenant, expected) in &folded {
        let stored = grants.dump(&ledger::TenantId::new(tenant.clone())?).await?;
        match first_difference(expected, &stored) {
            None => out.push(format!("authority state of {tenant}: equal to its log folded")),
            Some(d) => {
                ok = false;
                out.push(format!("authority state of {tenant}: differs from its log folded: {d}"));
            }
        }
    }
    if folded.is_empty() {
        out.push("authority state: no events".into());
    }
    // The version each inline row keeps is what the next command expects of its stream.
    match version_difference(&client).await? {
        None => out.push("authority state: every stored version is its stream's head".into()),
        Some(d) => {
            ok = false;
            out.push(format!("authority state: {d}"));
        }
    }
    Ok((ok, out.join("\n"), read < committed))
}

/// The first inline row whose version is not its stream's head.
async fn version_difference(client: &tokio_postgres::Client) -> Result<Option<String>> {
    let sql = format!(
        "WITH stored AS ( \
           SELECT tenant_id, 'session' AS category, session_id AS id, version FROM authority_sessions \
           UNION ALL SELECT tenant_id, 'profile', profile_id, version FROM authority_profiles WHERE version > 0 \
           UNION ALL SELECT tenant_id, 'approval', approval_id::text, version FROM authority_approvals \
           UNION ALL SELECT tenant_id, 'grant', grant_id::text, {} FROM active_task_grants) \
         SELECT s.tenant_id, s.category, s.id, s.version, \
           (SELECT max(e.stream_version) FROM events e WHERE e.stream_id = {}) \
         FROM stored s \
         UNION ALL SELECT d.tenant_id, 'deployment', '', d.version, \
           (SELECT max(e.stream_version) FROM events e WHERE e.stream_id = 'deployment-' || d.tenant_id) \
         FROM authority_settings d WHERE d.version > 0",
        authorizer::GRANT_VERSION_SQL,
        ledger::entity_stream_sql("s.category", "s.tenant_id", "s.id"),
    );
    let rows = client.query(&sql, &[]).await?;
    for r in rows {
        let (version, head): (i64, Option<i64>) = (r.get(3), r.get(4));
        if Some(version) != head {
            let (tenant, category, id): (String, String, String) = (r.get(0), r.get(1), r.get(2));
            return Ok(Some(format!(
                "{category} {id:?} of {tenant} is stored at version {version}, its stream at {head:?}"
            )));
        }
    }
    Ok(None)
}

/// The first entity where two worlds differ, named, with both sides.
fn first_difference(expected: &authorizer::domain::World, stored: &authorizer::domain::World) -> Option<String> {
    use std::collections::BTreeSet;
    use std::fmt::Debug;
    fn keyed<K: Ord + Debug + Clone + std::hash::Hash + Eq, V: PartialEq + Debug>(
        what: &str,
        a: &std::collections::HashMap<K, V>,
        b: &std::collections::HashMap<K, V>,
    ) -> Option<String> {
        let keys: BTreeSet<&K> = a.keys().chain(b.keys()).collect();
        keys.into_iter()
            .find(|k| a.get(k) != b.get(k))
            .map(|k| format!("{what} {k:?}\n  replayed: {:?}\n  stored:   {:?}", a.get(k), b.get(k)))
    }
    keyed("session", &expected.sessions, &stored.sessions)
        .or_else(|| keyed("profile", &expected.profiles, &stored.profiles))
        .or_else(|| keyed("approval", &expected.approvals, &stored.approvals))
        .or_else(|| keyed("grant", &expected.grants, &stored.grants))
        .or_else(|| keyed("run", &expected.run_snapshots, &stored.run_snapshots))
        .or_else(|| {
            let deployment = |w: &authorizer::domain::World| (w.settings.clone(), w.standing.clone(), w.policy.clone());
            (deployment(expected) != deployment(stored)).then(|| {
                format!(
                    "settings, pin and policy\n  replayed: {:?}\n  stored:   {:?}",
                    deployment(expected),
                    deployment(stored)
                )
            })
        })
}

/// Profiles of `tenant` that no owner was recorded for (they predate `browser.profile.claimed`),
/// reported or only bound by a session, each with the sessions bound to it, ordered by profile:
/// what an operator has the profiles service report again after the upgrade.
pub async fn unclaimed_profiles(client: &tokio_postgres::Client, tenant: &str) -> Result<Vec<(String, Vec<String>)>> {
    let rows = client
        .query(
            "WITH bound AS (SELECT s.state->'created'->>'browser_profile_id' AS profile_id, s.session_id \
               FROM authority_sessions s WHERE s.tenant_id = $1 AND s.version > 0 \
               AND s.state->'created'->>'browser_profile_id' IS NOT NULL), \
             owned AS (SELECT p.profile_id FROM authority_profiles p \
               WHERE p.tenant_id = $1 AND p.version > 0 AND p.state->>'owner' IS NOT NULL), \
             candidates AS (SELECT p.profile_id FROM authority_profiles p WHERE p.tenant_id = $1 \
               AND p.version > 0 UNION SELECT bound.profile_id FROM bound) \
             SELECT c.profile_id, coalesce(array_agg(b.session_id ORDER BY b.session_id COLLATE \"C\") \
               FILTER (WHERE b.session_id IS NOT NULL), '{}') \
             FROM candidates c LEFT JOIN bound b ON b.profile_id = c.profile_id \
             WHERE NOT EXISTS (SELECT 1 FROM owned o WHERE o.profile_id = c.profile_id) \
             GROUP BY c.profile_id ORDER BY c.profile_id COLLATE \"C\"",
            &[&tenant],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
