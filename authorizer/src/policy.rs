//! The deterministic policy engine that runs before any grant. Rules come from a JSON file; the
//! file's SHA-256 is the policy version a grant pins. DENY and hardline answers are final.

use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Deny,
    Hardline,
    RequireApproval,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    pub effect: Effect,
    /// Matches when the action's consequence code is one of these (empty: any).
    #[serde(default)]
    pub consequences: Vec<String>,
    /// Matches when the page's origin is one of these (empty: any).
    #[serde(default)]
    pub origins: Vec<String>,
    /// Matches when the action kind is one of these (empty: any).
    #[serde(default)]
    pub actions: Vec<String>,
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
        }
        Ok(Self { version: format!("sha256:{}", hex::encode(Sha256::digest(bytes))), rules: file.rules })
    }

    /// A policy with no rules: everything requires approval.
    pub fn empty() -> Self {
        Self::parse(br#"{"rules":[]}"#).expect("the empty policy parses")
    }

    /// The first matching DENY or hardline rule wins; otherwise an approval is required.
    pub fn evaluate(&self, action: &str, consequence: &str, origin: &str) -> Verdict {
        let hit = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        for r in &self.rules {
            if hit(&r.actions, action) && hit(&r.consequences, consequence) && hit(&r.origins, origin) {
                match r.effect {
                    Effect::Deny => return Verdict::Deny { rule: r.id.clone() },
                    Effect::Hardline => return Verdict::Hardline { rule: r.id.clone() },
                    Effect::RequireApproval => return Verdict::RequireApproval,
                }
            }
        }
        Verdict::RequireApproval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_match_wins_and_version_is_the_content_hash() {
        let text = br#"{"rules":[
            {"id":"never-delete","effect":"hardline","consequences":["deletion"]},
            {"id":"no-evil","effect":"deny","origins":["https://evil.example"]}]}"#;
        let p = Policy::parse(text).unwrap();
        assert_eq!(
            p.evaluate("click", "deletion", "https://a.example"),
            Verdict::Hardline { rule: "never-delete".into() }
        );
        assert_eq!(p.evaluate("click", "unknown", "https://evil.example"), Verdict::Deny { rule: "no-evil".into() });
        assert_eq!(p.evaluate("click", "unknown", "https://a.example"), Verdict::RequireApproval);
        assert!(p.version.starts_with("sha256:"));
        assert_ne!(p.version, Policy::empty().version);
        assert!(Policy::parse(br#"{"rules":[{"id":"a","effect":"deny"},{"id":"a","effect":"deny"}]}"#).is_err());
        assert!(Policy::parse(br#"{"rules":[{"id":"a","effect":"allow"}]}"#).is_err(), "no rule can allow");
    }
}
