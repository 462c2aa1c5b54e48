//! A reply's text and arguments as the contract reads them, for both providers' shapes.

use serde_json::Value;

/// The text of a reply split as the contract reads it: the first non-empty line is the evidence
/// line, and anything else the model wrote is extra text (which the rules refuse, counted).
pub(crate) fn split_text(text: &str) -> (String, String) {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let evidence = lines.next().unwrap_or_default().to_owned();
    let extra: Vec<&str> = lines.collect();
    (evidence, extra.join("\n"))
}

/// A call's arguments as the model sent them: JSON, or (malformed) kept as a string the rules
/// refuse.
pub(crate) fn arguments(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}
