//! A past decision made without a human, judged again: the facts it recorded through the
//! current classifier and a given policy, in the authorizer's order (policy first, then what the
//! grant may cover). Pure; `grantctl audit rejudge` feeds it from the log and writes nothing.

use classifier::{Grant, TaskScope};

use crate::catalogue::{AuthorizationKind, DecidedUnder};
use crate::policy::{ActionKind, Policy, Verdict};

/// How a decision would go now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejudged {
    /// Allowed again, as it was.
    Same,
    /// Refused outright; the code names the rule.
    WouldDeny { code: String, why: String },
    /// Sent to the owner's card; the code is the reason a grant would not cover it.
    WouldAsk { code: String, why: String },
}

/// Judges `d` again under `policy` and the current classifier. `scope` is the task grant's
/// (origin and prefix) when a task grant allowed it. The grant's caps and clock are not judged
/// again: they are counts, not readings.
pub fn rejudge(policy: &Policy, kind: AuthorizationKind, scope: Option<(&str, &str)>, d: &DecidedUnder) -> Rejudged {
    let (classification, consequences, origin) = crate::model::policy_reading(&d.element, &d.page);
    match policy.evaluate(ActionKind::of(&d.action), &consequences, origin.as_deref()) {
        Verdict::Deny { rule } | Verdict::Hardline { rule } => {
            let why = format!("policy rule {rule:?} refuses it");
            return Rejudged::WouldDeny { code: format!("policy:{rule}"), why };
        }
        Verdict::Escalate { rule } => {
            let why = format!("policy rule {rule:?} sends it to the owner");
            return Rejudged::WouldAsk { code: "policy_escalation".into(), why };
        }
        Verdict::RequireApproval => {}
    }
    let grant = match (kind, scope) {
        (AuthorizationKind::StandingGrant, _) => Grant::Standing,
        (AuthorizationKind::BrowserTaskGrant, Some((origin, prefix))) => Grant::Task(TaskScope {
            origin: origin.to_owned(),
            path_prefix: prefix.to_owned(),
            chars_remaining: u32::MAX,
        }),
        (AuthorizationKind::BrowserTaskGrant, None) => {
            let why = "the task grant that allowed it is not in the log".to_owned();
            return Rejudged::WouldAsk { code: "grant_not_in_log".into(), why };
        }
        // A use the owner allowed on a card is not judged again: the owner saw it.
        (AuthorizationKind::Approval | AuthorizationKind::Policy, _) => return Rejudged::Same,
    };
    match classifier::covers(&grant, &d.action, &d.element, &d.page) {
        Ok(()) => Rejudged::Same,
        Err(nc) => {
            let reads: Vec<String> = classification
                .matches
                .iter()
                .map(|m| format!("{} reads as {}", m.source_name(), m.named.code()))
                .collect();
            let why = if reads.is_empty() { nc.reason.code().to_owned() } else { reads.join("; ") };
            Rejudged::WouldAsk { code: nc.reason.code().to_owned(), why }
        }
    }
}
