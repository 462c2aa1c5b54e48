//! `grantctl audit rejudge`: every past decision made without a human (a standing grant's or a
//! task grant's use), replayed from the facts it recorded through the current classifier and a
//! given policy; each that would now go another way is reported. Writes nothing.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use anyhow::{Context, Result};
use grant_domain::catalogue::{AuthorizationKind, Event};
use grant_domain::policy::Policy;
use grant_domain::rejudge::{Rejudged, rejudge};
use ledger::PgStore;
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

/// One decision that would now differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub position: u64,
    pub tenant: String,
    pub session: String,
    pub grant: Option<Uuid>,
    pub recorded_at: OffsetDateTime,
    pub kind: AuthorizationKind,
    /// What the card would have called it: the element's name and the page.
    pub what: String,
    pub outcome: Rejudged,
    pub classifier_then: String,
    pub policy_then: String,
}

/// What a re-judge found.
#[derive(Debug, Default)]
pub struct Report {
    /// Decisions made without a human that were judged again.
    pub judged: u64,
    /// Such decisions recorded before decisions kept their facts: they cannot be replayed.
    pub unreplayable: u64,
    pub changed: Vec<Changed>,
}

/// Which decisions to judge.
#[derive(Debug, Default)]
pub struct Scope {
    pub tenant: Option<String>,
    pub since: Option<OffsetDateTime>,
}

pub async fn run(store: &PgStore, policy: &Policy, scope: &Scope) -> Result<Report> {
    let mut report = Report::default();
    let mut grants: HashMap<(String, Uuid), (String, String)> = HashMap::new();
    crate::each_page_all(store, |page| {
        for e in page {
            let tenant = e.tenant_id.as_str();
            if scope.tenant.as_deref().is_some_and(|t| t != tenant) {
                continue;
            }
            // Only the two types it reads are decoded: an event this build cannot read, of another
            // type, does not stop the report.
            if !matches!(e.event_type.as_str(), "browser.task_grant.created" | "tool.call.authorized") {
                continue;
            }
            let event = Event::from_recorded(e).with_context(|| format!("event at position {}", e.global_position))?;
            match event {
                Event::TaskGrantCreated(g) => {
                    grants.insert((tenant.to_owned(), g.grant_id), (g.scope.origin, g.scope.path_prefix));
                }
                Event::ToolCallAuthorized(u)
                    if matches!(
                        u.authorization_kind,
                        AuthorizationKind::StandingGrant | AuthorizationKind::BrowserTaskGrant
                    ) && scope.since.is_none_or(|t| e.recorded_at >= t) =>
                {
                    report.judged += 1;
                    let Some(d) = &u.decided else {
                        report.unreplayable += 1;
                        continue;
                    };
                    let grant_scope = u.grant_id.and_then(|g| grants.get(&(tenant.to_owned(), g)));
                    let outcome =
                        rejudge(policy, u.authorization_kind, grant_scope.map(|(o, p)| (o.as_str(), p.as_str())), d);
                    if outcome != Rejudged::Same {
                        let name = u.view.element_name.as_deref().unwrap_or("(no name)");
                        report.changed.push(Changed {
                            position: e.global_position,
                            tenant: tenant.to_owned(),
                            session: u.session_id.clone(),
                            grant: u.grant_id,
                            recorded_at: e.recorded_at,
                            kind: u.authorization_kind,
                            what: format!("{} {name:?} on {}", u.view.action_kind, d.page.url),
                            outcome,
                            classifier_then: d.classifier_version.clone(),
                            policy_then: d.policy_version.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(())
    })
    .await?;
    Ok(report)
}

fn verdict(o: &Rejudged) -> (&'static str, &str, &str) {
    match o {
        Rejudged::Same => ("same", "", ""),
        Rejudged::WouldDeny { code, why } => ("would_deny", code, why),
        Rejudged::WouldAsk { code, why } => ("would_ask", code, why),
    }
}

/// Text grouped by reason, or one JSON line per decision.
pub fn print(report: &Report, policy: &Policy, jsonl: bool, mut out: impl Write) -> Result<()> {
    let now = (classifier::version(), policy.version.as_str());
    if jsonl {
        for c in &report.changed {
            let (v, code, why) = verdict(&c.outcome);
            writeln!(
                out,
                "{}",
                json!({
                    "position": c.position, "tenant": c.tenant, "session_id": c.session, "grant_id": c.grant,
                    "recorded_at": c.recorded_at.format(&time::format_description::well_known::Rfc3339)?,
                    "authorization": c.kind, "act": c.what, "now": v, "reason": code, "why": why,
                    "classifier_then": c.classifier_then, "policy_then": c.policy_then,
                    "classifier_now": now.0, "policy_now": now.1,
                })
            )?;
        }
        return Ok(());
    }
    let mut groups: BTreeMap<(&str, &str), Vec<&Changed>> = BTreeMap::new();
    for c in &report.changed {
        let (v, code, _) = verdict(&c.outcome);
        groups.entry((v, code)).or_default().push(c);
    }
    writeln!(
        out,
        "{} decisions made without a human judged again under classifier {} and policy {}; {} would now differ; {} \
         were recorded without their facts and could not be judged",
        report.judged,
        now.0,
        now.1,
        report.changed.len(),
        report.unreplayable
    )?;
    for ((v, code), list) in groups {
        let verb = if v == "would_deny" { "would be refused" } else { "would ask the owner" };
        writeln!(out, "\n{verb} ({code}): {}", list.len())?;
        for c in list {
            let (_, _, why) = verdict(&c.outcome);
            let changed = match (c.classifier_then == now.0, c.policy_then == now.1) {
                (true, true) => "same classifier and policy",
                (false, true) => "classifier changed",
                (true, false) => "policy changed",
                (false, false) => "classifier and policy changed",
            };
            writeln!(out, "  #{} {} {}: {} — {why} ({changed})", c.position, c.tenant, c.session, c.what)?;
        }
    }
    Ok(())
}
