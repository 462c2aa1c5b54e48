//! The deterministic policy engine that runs before any grant. Rules come from a JSON file; the
//! file's SHA-256 is the policy version a grant pins. No rule can allow. Hardline and DENY rules
//! are final and win wherever they stand in the file; an advisory escalation sends the action
//! to the owner's card, which no grant can answer in the owner's place. Rule fields are closed
//! vocabularies: a misspelt action or consequence stops the file from loading, since a rule
//! that silently never matches is a rule that silently never protects.

use classifier::{Action, Consequence};
use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Ask the owner, as with no rule; grants may still answer.
    RequireApproval,
    /// Ask the owner on a card no grant can answer.
    AdvisoryEscalation,
    /// Refuse.
    Deny,
    /// Refuse, and no configuration may ever relax it.
    Hardline,
}

/// The action kinds a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    Click,
    Type,
    Select,
    Check,
    Press,
    Scroll,
}

impl ActionKind {
    pub fn of(action: &Action) -> Self {
        match action {
            Action::Click => Self::Click,
            Action::Type { .. } => Self::Type,
            Action::Select { .. } => Self::Select,
            Action::Check => Self::Check,
            Action::Press { .. } => Self::Press,
            Action::Scroll { .. } => Self::Scroll,
        }
    }
}

/// A consequence code from the classifier's closed set (`routine`, `unknown` or a named one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct ConsequenceCode(pub Consequence);

impl TryFrom<String> for ConsequenceCode {
    type Error = String;

    fn try_from(code: String) -> Result<Self, String> {
        Consequence::from_code(&code).map(Self).ok_or_else(|| format!("unknown consequence {code:?}"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    pub effect: Effect,
    /// Matches when any consequence the classifier read is one of these (empty: any).
    #[serde(default)]
    pub consequences: Vec<ConsequenceCode>,
    /// Matches when the page's origin is one of these (empty: any).
    #[serde(default)]
    pub origins: Vec<String>,
    /// Matches when the action kind is one of these (empty: any).
    #[serde(default)]
    pub actions: Vec<ActionKind>,
}

impl Rule {
    /// `origin` is `None` when the page's origin cannot be read: every origin rule matches then,
    /// so a malformed URL cannot slip past a DENY for its site.
    fn matches(&self, action: ActionKind, consequences: &[Consequence], origin: Option<&str>) -> bool {
        (self.actions.is_empty() || self.actions.contains(&action))
            && (self.consequences.is_empty() || self.consequences.iter().any(|c| consequences.contains(&c.0)))
            && (self.origins.is_empty() || origin.is_none_or(|origin| self.origins.iter().any(|o| o == origin)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Vec<Rule>,
}

/// What the engine says about one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Final: the rule's id is the stable code.
    Deny {
        rule: String,
    },
    Hardline {
        rule: String,
    },
    /// The owner decides on a card; no grant answers it.
    Escalate {
        rule: String,
    },
    RequireApproval,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub version: String,
    rules: Vec<Rule>,
}

#[derive(Debug, thiserror::Error)]
#[error("policy file: {0}")]
pub struct PolicyError(String);

impl Policy {
    pub fn parse(bytes: &[u8]) -> Result<Self, PolicyError> {
        let file: File = serde_json::from_slice(bytes).map_err(|e| PolicyError(e.to_string()))?;
        let mut ids = std::collections::HashSet::new();
        for r in &file.rules {
            if r.id.is_empty() || !ids.insert(r.id.as_str()) {
                return Err(PolicyError(format!("rule id {:?} is empty or repeated", r.id)));
            }
            for o in &r.origins {
                // Compared exactly with the page's origin, so anything else could never match.
                let canonical = classifier::paths::location(o).ok().map(|l| l.origin);
                if canonical.as_deref() != Some(o.as_str()) {
                    return Err(PolicyError(format!(
                        "rule {:?}: origin {o:?} is not an origin written as https://host[:port]",
                        r.id
                    )));
                }
            }
        }
        Ok(Self { version: format!("sha256:{}", hex::encode(Sha256::digest(bytes))), rules: file.rules })
    }

    /// A policy with no rules: everything requires approval.
    pub fn empty() -> Self {
        Self::parse(br#"{"rules":[]}"#).expect("the empty policy parses")
    }

    /// The strongest effect among the matching rules, whatever their order: hardline, then DENY,
    /// then advisory escalation; among equals the first in the file names the verdict.
    /// `consequences` is every consequence the classifier read, not only the most specific.
    pub fn evaluate(&self, action: ActionKind, consequences: &[Consequence], origin: Option<&str>) -> Verdict {
        let strongest =
            self.rules.iter().filter(|r| r.matches(action, consequences, origin)).fold(None::<&Rule>, |best, r| {
                match best {
                    Some(b) if b.effect >= r.effect => Some(b),
                    _ => Some(r),
                }
            });
        match strongest {
            Some(r) => match r.effect {
                Effect::Hardline => Verdict::Hardline { rule: r.id.clone() },
                Effect::Deny => Verdict::Deny { rule: r.id.clone() },
                Effect::AdvisoryEscalation => Verdict::Escalate { rule: r.id.clone() },
                Effect::RequireApproval => Verdict::RequireApproval,
            },
            None => Verdict::RequireApproval,
        }
    }
}

#[cfg(test)]
mod tests {
    use classifier::Named;

    use super::*;

    const DELETION: &[Consequence] = &[Consequence::Named(Named::Deletion)];
    const UNKNOWN: &[Consequence] = &[Consequence::Unknown];

    fn check(rules: &str, action: ActionKind, consequences: &[Consequence], origin: &str, expect: Verdict) {
        let p = Policy::parse(format!(r#"{{"rules":[{rules}]}}"#).as_bytes()).unwrap();
        assert_eq!(p.evaluate(action, consequences, Some(origin)), expect, "{rules}");
    }

    #[test]
    fn the_strongest_matching_rule_wins_wherever_it_stands() {
        let ask = r#"{"id":"ask","effect":"require_approval"}"#;
        let hard = r#"{"id":"never-delete","effect":"hardline","consequences":["deletion"]}"#;
        let deny = r#"{"id":"no-evil","effect":"deny","origins":["https://evil.example"]}"#;
        let esc = r#"{"id":"escalate-type","effect":"advisory_escalation","actions":["type"]}"#;
        let a = "https://a.example";
        let hardline = || Verdict::Hardline { rule: "never-delete".into() };
        // An earlier require_approval or escalation never shadows a later hardline or DENY.
        check(&format!("{ask},{hard}"), ActionKind::Click, DELETION, a, hardline());
        check(&format!("{esc},{deny},{hard}"), ActionKind::Type, DELETION, "https://evil.example", hardline());
        check(
            &format!("{ask},{esc},{deny}"),
            ActionKind::Type,
            UNKNOWN,
            "https://evil.example",
            Verdict::Deny { rule: "no-evil".into() },
        );
        check(
            &format!("{ask},{esc}"),
            ActionKind::Type,
            UNKNOWN,
            a,
            Verdict::Escalate { rule: "escalate-type".into() },
        );
        check(&format!("{ask},{esc}"), ActionKind::Click, UNKNOWN, a, Verdict::RequireApproval);
        check(&format!("{hard},{deny}"), ActionKind::Click, UNKNOWN, a, Verdict::RequireApproval);
        // Every consequence read counts, not only the most specific one.
        let both = [Consequence::Named(Named::Payment), Consequence::Named(Named::Deletion)];
        check(hard, ActionKind::Click, &both, a, hardline());
    }

    #[test]
    fn an_unreadable_origin_matches_every_origin_rule() {
        let p = Policy::parse(br#"{"rules":[{"id":"no-evil","effect":"deny","origins":["https://evil.example"]}]}"#)
            .unwrap();
        assert_eq!(p.evaluate(ActionKind::Click, UNKNOWN, None), Verdict::Deny { rule: "no-evil".into() });
    }

    #[test]
    fn version_is_the_content_hash() {
        let p = Policy::parse(br#"{"rules":[{"id":"a","effect":"deny"}]}"#).unwrap();
        assert!(p.version.starts_with("sha256:"));
        assert_ne!(p.version, Policy::empty().version);
    }

    #[test]
    fn a_rule_that_could_never_match_or_could_allow_is_refused_at_load() {
        for (rules, says) in [
            (r#"{"id":"a","effect":"deny"},{"id":"a","effect":"deny"}"#, "repeated"),
            (r#"{"id":"","effect":"deny"}"#, "empty"),
            (r#"{"id":"a","effect":"allow"}"#, "unknown variant `allow`"),
            (r#"{"id":"a","effect":"deny","actions":["clik"]}"#, "unknown variant `clik`"),
            (r#"{"id":"a","effect":"deny","consequences":["payments"]}"#, "unknown consequence \"payments\""),
            (r#"{"id":"a","effect":"deny","origins":["https://a.example/"]}"#, "not an origin"),
            (r#"{"id":"a","effect":"deny","origins":["A.example"]}"#, "not an origin"),
            (r#"{"id":"a","effect":"deny","tools":["browser.act"]}"#, "unknown field `tools`"),
        ] {
            let err = Policy::parse(format!(r#"{{"rules":[{rules}]}}"#).as_bytes()).unwrap_err().to_string();
            assert!(err.contains(says), "{rules}: {err}");
        }
    }
}
