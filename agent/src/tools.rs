//! The tools a model is given, as the JSON Schemas it is shown, and the check of each call it
//! makes against them. A call that does not validate never reaches the runtime: the model is
//! shown why, and the refusal is counted.

use proto::runtime::{Role, WaitFor};
use serde_json::{Value, json};

use proto::ids::Id;

use crate::reason::Reason;

/// One tool as the model sees it.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
}

/// The roles a click may name: the record's clickable set.
pub const CLICKABLE: [(&str, Role); 8] = [
    ("button", Role::Button),
    ("link", Role::Link),
    ("checkbox", Role::Checkbox),
    ("radio", Role::Radio),
    ("option", Role::Option),
    ("tab", Role::Tab),
    ("menuitem", Role::Menuitem),
    ("combobox", Role::Combobox),
];

/// The fields a type or a select names.
pub const FIELDS: [(&str, Role); 4] = [
    ("textbox", Role::Textbox),
    ("searchbox", Role::Searchbox),
    ("combobox", Role::Combobox),
    ("listbox", Role::Listbox),
];

/// A number input: a spin button to the platform, typed into as a text box is, never selected
/// from.
pub const NUMBER: [(&str, Role); 1] = [("spinbutton", Role::Spinbutton)];

/// A role as the snapshot prints it and the schemas spell it.
pub fn role_name(role: Role) -> Option<&'static str> {
    let all = CLICKABLE.iter().chain(FIELDS.iter()).chain(NUMBER.iter()).chain(SHOWN_ONLY.iter());
    all.into_iter().find(|(_, r)| *r == role).map(|(n, _)| *n)
}

/// Roles a snapshot lists that no tool but scroll acts on: shown so the model sees the page as
/// it is.
pub const SHOWN_ONLY: [(&str, Role); 1] = [("slider", Role::Slider)];

/// The keys a key press may name and the scroll steps: the classifier's, which the runtime and
/// the authorizer hold every act to (never a letter or digit, never a free distance).
pub use classifier::coverage::{KEYS, SCROLL_STEPS};

// The ids' patterns are the wire's own (`proto::ids`), so the schema a model is shown and the
// services' checks take the same ids.
const SNAPSHOT_ID: &str = Id::SnapshotId.pattern();
const REF: &str = Id::Ref.pattern();
const TOKEN: &str = Id::ApprovalToken.pattern();
const FIELD_ID: &str = Id::FieldId.pattern();

fn target(roles: &[(&str, Role)], extra: Value) -> Value {
    // Each role once: a role in two sets (a combobox is clicked and typed into) is one value.
    let mut names: Vec<&str> = Vec::new();
    for (n, _) in roles {
        if !names.contains(n) {
            names.push(n);
        }
    }
    let mut properties = json!({
        "snapshot_id": { "type": "string", "pattern": SNAPSHOT_ID,
            "description": "The id of the snapshot this ref was read from: your most recent one." },
        "ref": { "type": "string", "pattern": REF, "description": "The node's ref exactly as printed in that snapshot." },
        "expected_role": { "type": "string", "enum": names, "description": "The role printed for this ref." },
        "expected_name": { "type": "string", "minLength": 1, "maxLength": 120,
            "description": "The accessible name printed for this ref, copied character for character." },
        "consequential": { "type": "boolean",
            "description": "Whether this changes state in the site: submits, saves, confirms, cancels, sends, pays or deletes. The runtime decides independently; disagreements are logged." },
        "approval_token": { "type": "string", "pattern": TOKEN,
            "description": "The single-use token request_approval returned for this exact element and action." },
    });
    let mut required: Vec<String> =
        ["snapshot_id", "ref", "expected_role", "expected_name", "consequential"].map(String::from).to_vec();
    if let (Some(p), Value::Object(more)) = (properties.as_object_mut(), extra) {
        for (k, v) in more {
            required.push(k.clone());
            p.insert(k, v);
        }
    }
    json!({ "type": "object", "additionalProperties": false, "required": required, "properties": properties })
}

/// Every tool, in the order the model is shown them.
pub fn tools() -> Vec<Tool> {
    let field_roles: Vec<(&str, Role)> = FIELDS.to_vec();
    let typed_roles: Vec<(&str, Role)> = [FIELDS.as_slice(), NUMBER.as_slice()].concat();
    vec![
        Tool {
            name: "snapshot",
            description: "Observe the current page as an accessibility snapshot. Call it first, and again after any action that reports changed = true.",
            input_schema: json!({ "type": "object", "additionalProperties": false, "properties": {} }),
        },
        Tool {
            name: "click",
            description: "Click exactly one interactive node from the snapshot you were most recently given. You must state which snapshot you read it from and the accessible name you believe you are clicking; the runtime re-resolves the node in the live page and refuses the click if the snapshot is stale, the ref is gone, or the name has changed. If the resolved element is consequential, the click requires an approval token obtained from request_approval for this exact element. You cannot click by coordinate, CSS selector, XPath or element id, and there is no parameter for any of those.",
            input_schema: with_optional(
                click_words(target(&CLICKABLE, json!({}))),
                "wait_for",
                json!({
                    "type": "string", "enum": WAIT_FOR.map(|(n, _)| n), "default": "settle",
                    "description": "What the runtime waits for before returning. 'settle' waits for network idle plus a stable accessibility tree, which is what makes the next snapshot trustworthy."
                }),
            ),
        },
        Tool {
            name: "type",
            description: "Type the value of one task-record field into one field, naming the value by its field id. You never see or write the value itself.",
            input_schema: target(
                &typed_roles,
                json!({ "field_id": { "type": "string", "pattern": FIELD_ID, "description": "A task-record field id from the list you were given." } }),
            ),
        },
        Tool {
            name: "select",
            description: "Choose one option of a select or listbox, by the option's label. Beyond the record's tools because a select's options are not nodes of the snapshot: the runtime chooses within the select's own list, so no option outside it can be reached.",
            input_schema: target(
                &field_roles,
                json!({ "option": { "type": "string", "minLength": 1, "maxLength": 120, "description": "The option's label, copied exactly." } }),
            ),
        },
        Tool {
            name: "key",
            description: "Press one named key (Tab, arrows, Escape, …) on a node of the snapshot. Never a letter or digit, and never Enter or Space on a button, link or choice (that is a click). Beyond the record's tools because some pages move between controls or choices only by keyboard.",
            input_schema: target(&CLICKABLE, json!({ "key": { "type": "string", "enum": KEYS } })),
        },
        Tool {
            name: "scroll",
            description: "Scroll the page by one of the fixed steps (pixels; negative is up), from a node of the snapshot. Beyond the record's tools because some pages load more content only when scrolled; never to reach a node you assume is below the fold.",
            input_schema: target(&CLICKABLE, json!({ "by": { "type": "integer", "enum": SCROLL_STEPS } })),
        },
        Tool {
            name: "screenshot",
            description: "Capture the screen for a human: before a submit, at a confirmation, at an escalation.",
            input_schema: json!({ "type": "object", "additionalProperties": false, "properties": {} }),
        },
        Tool {
            name: "request_approval",
            description: "Ask the owner to approve one consequential action on one node of the current snapshot: a click, or the act the runtime answered APPROVAL_REQUIRED for. Returns an approval token for exactly that element and action, or a rejection.",
            input_schema: target(&[CLICKABLE.as_slice(), FIELDS.as_slice(), NUMBER.as_slice()].concat(), json!({})),
        },
        Tool {
            name: "escalate",
            description: "Stop and hand the task to a human, for any reason, including \"I am not sure\".",
            input_schema: json!({
                "type": "object", "additionalProperties": false, "required": ["reason"],
                "properties": {
                    "reason": { "type": "string", "enum": Reason::MODEL.map(Reason::code) },
                    "refs": { "type": "array", "maxItems": 8, "items": { "type": "string", "pattern": REF },
                        "description": "The refs the reason concerns (both, for ambiguous_target; where it appeared, for suspected_injection)." },
                    "detail": { "type": "string", "maxLength": 200, "description": "What you were looking for. Never quote page text at length." }
                }
            }),
        },
    ]
}

/// The argument an MCP client's model writes its evidence line in: a client's model has no text
/// beside a call to put it in, so the record's line is a required argument there.
pub const EVIDENCE: &str = "evidence";

/// The tools as an MCP server lists them: [`tools`], each with the evidence line required.
pub fn with_evidence() -> Vec<Tool> {
    tools()
        .into_iter()
        .map(|mut t| {
            t.input_schema["properties"][EVIDENCE] = json!({
                "type": "string", "minLength": 1, "maxLength": proto::limits::MAX_EVIDENCE_CHARS,
                "description": "One line: SUBGOAL <n> | evidence: <role> \"<accessible name>\" ref=<ref> from snapshot <snapshot_id> | intent: <what this action accomplishes>. The accessible name copied character for character from the snapshot; `evidence: none` for a snapshot, screenshot or escalation."
            });
            let required = t.input_schema["required"].as_array().cloned().unwrap_or_default();
            t.input_schema["required"] = Value::Array([required, vec![json!(EVIDENCE)]].concat());
            t
        })
        .collect()
}

/// What a click may wait for, as the schema spells it.
pub const WAIT_FOR: [(&str, WaitFor); 4] = [
    ("settle", WaitFor::Settle),
    ("navigation", WaitFor::Navigation),
    ("dialog", WaitFor::Dialog),
    ("none", WaitFor::None),
];

/// The click schema's properties as the record words them.
fn click_words(mut schema: Value) -> Value {
    for (key, words) in [
        (
            "snapshot_id",
            "The id of the snapshot this ref was read from. Must be your most recent snapshot. Any earlier id is rejected as stale.",
        ),
        (
            "ref",
            "Node ref exactly as printed in that snapshot. Refs are per-snapshot and are not stable across page changes.",
        ),
        (
            "expected_role",
            "The ARIA role printed for this ref in the snapshot. A role outside this set is not clickable by this tool.",
        ),
        (
            "expected_name",
            "The accessible name printed for this ref, copied character for character. The runtime compares it to the live accessible name after re-resolving the ref and refuses on mismatch. Do not normalise whitespace, expand abbreviations, or translate.",
        ),
        (
            "consequential",
            "Your judgement of whether this click changes state in the portal: submits, saves, confirms, cancels, sends, pays or deletes. The runtime decides this independently from the resolved element and the origin policy; your answer does not grant permission. Disagreements are logged and reviewed.",
        ),
        (
            "approval_token",
            "Single-use token from request_approval, bound to this run, this snapshot_id and this ref. Required for any element the runtime resolves as consequential. Omit for benign clicks; a token that does not match the element is treated as a policy violation, not a retryable error.",
        ),
    ] {
        schema["properties"][key]["description"] = json!(words);
    }
    schema
}

/// `schema` with one more property that is not required.
fn with_optional(mut schema: Value, key: &str, property: Value) -> Value {
    schema["properties"][key] = property;
    schema
}

/// The element a call names, as the model claimed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub snapshot_id: String,
    pub node_ref: String,
    pub role: Role,
    pub name: String,
    pub consequential: bool,
    pub approval_token: Option<String>,
    /// What the runtime waits for after the act (a click may say; settle otherwise).
    pub wait_for: WaitFor,
}

/// What a call asks of the browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Click,
    Type { field_id: String },
    Select { option: String },
    Key { key: String },
    Scroll { by: i32 },
}

/// A call that validated against its tool's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Snapshot,
    Screenshot,
    Act { target: Target, act: Act },
    RequestApproval { target: Target },
    Escalate { reason: Reason, refs: Vec<String>, detail: String },
}

/// Why a call was refused before the runtime, as the model is shown it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{tool}: {reason}")]
pub struct Invalid {
    pub tool: String,
    pub reason: String,
}

fn matches(pattern: &str, s: &str) -> bool {
    Id::ALL.into_iter().find(|id| id.pattern() == pattern).is_some_and(|id| id.holds(s))
}

/// Checks `arguments` of a call to tool `name` against its schema.
pub fn check(name: &str, arguments: &Value) -> Result<Call, Invalid> {
    let bad = |reason: String| Invalid { tool: name.to_owned(), reason };
    let Some(tool) = tools().into_iter().find(|t| t.name == name) else {
        return Err(bad("there is no such tool".into()));
    };
    let args = arguments.as_object().ok_or_else(|| bad("the arguments are a JSON object".into()))?;
    let schema = &tool.input_schema;
    let properties = schema["properties"].as_object().cloned().unwrap_or_default();
    if let Some(extra) = args.keys().find(|k| !properties.contains_key(*k)) {
        return Err(bad(format!("there is no argument {extra:?}")));
    }
    for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if !args.contains_key(required) {
            return Err(bad(format!("{required} is required")));
        }
    }
    for (key, value) in args {
        check_value(&properties[key], value).map_err(|why| bad(format!("{key} {why}")))?;
    }
    let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let target = || -> Result<Target, Invalid> {
        let role_name = text("expected_role");
        let role = CLICKABLE
            .iter()
            .chain(FIELDS.iter())
            .find(|(n, _)| *n == role_name)
            .map(|(_, r)| *r)
            .ok_or_else(|| bad("expected_role is not a role this tool takes".into()))?;
        Ok(Target {
            snapshot_id: text("snapshot_id"),
            node_ref: text("ref"),
            role,
            name: text("expected_name"),
            consequential: args.get("consequential").and_then(Value::as_bool).unwrap_or(false),
            approval_token: args.get("approval_token").and_then(Value::as_str).map(str::to_owned),
            wait_for: WAIT_FOR.iter().find(|(n, _)| *n == text("wait_for")).map_or(WaitFor::Settle, |(_, w)| *w),
        })
    };
    Ok(match name {
        "snapshot" => Call::Snapshot,
        "screenshot" => Call::Screenshot,
        "click" => Call::Act { target: target()?, act: Act::Click },
        "type" => Call::Act { target: target()?, act: Act::Type { field_id: text("field_id") } },
        "select" => Call::Act { target: target()?, act: Act::Select { option: text("option") } },
        "key" => Call::Act { target: target()?, act: Act::Key { key: text("key") } },
        "scroll" => {
            let by = args.get("by").and_then(Value::as_i64).and_then(|b| i32::try_from(b).ok()).unwrap_or_default();
            Call::Act { target: target()?, act: Act::Scroll { by } }
        }
        "request_approval" => Call::RequestApproval { target: target()? },
        _ => Call::Escalate {
            reason: Reason::from_model(&text("reason"))
                .ok_or_else(|| bad("reason is not one the contract names".into()))?,
            refs: args
                .get("refs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default(),
            detail: text("detail"),
        },
    })
}

/// One value against its property's schema: the subset the tools above use.
fn check_value(schema: &Value, value: &Value) -> Result<(), String> {
    match schema["type"].as_str() {
        Some("string") => {
            let s = value.as_str().ok_or("is a string")?;
            let chars = s.chars().count() as u64;
            if let Some(min) = schema["minLength"].as_u64()
                && chars < min
            {
                return Err(format!("is at least {min} characters"));
            }
            if let Some(max) = schema["maxLength"].as_u64()
                && chars > max
            {
                return Err(format!("is at most {max} characters"));
            }
            if let Some(p) = schema["pattern"].as_str()
                && !matches(p, s)
            {
                return Err(format!("does not match {p}"));
            }
            if let Some(options) = schema["enum"].as_array()
                && !options.iter().any(|o| o.as_str() == Some(s))
            {
                return Err("is not one of the values the tool takes".into());
            }
            Ok(())
        }
        Some("boolean") => value.as_bool().map(|_| ()).ok_or_else(|| "is true or false".into()),
        Some("integer") => {
            let n = value.as_i64().ok_or("is a whole number")?;
            match schema["enum"].as_array() {
                Some(options) if !options.iter().any(|o| o.as_i64() == Some(n)) => {
                    Err("is not one of the steps the tool takes".into())
                }
                _ => Ok(()),
            }
        }
        Some("array") => {
            let items = value.as_array().ok_or("is a list")?;
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                return Err(format!("has at most {max} items"));
            }
            items.iter().try_for_each(|i| check_value(&schema["items"], i))
        }
        _ => Err("has no schema".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click() -> Value {
        json!({ "snapshot_id": "snap_0123456789ab", "ref": "n12", "expected_role": "button",
                "expected_name": "Next", "consequential": false })
    }

    #[test]
    fn every_schema_is_closed_and_names_its_required_fields() {
        for t in tools() {
            assert_eq!(t.input_schema["additionalProperties"], false, "{}", t.name);
            let props = t.input_schema["properties"].as_object().unwrap();
            for r in t.input_schema["required"].as_array().into_iter().flatten() {
                assert!(props.contains_key(r.as_str().unwrap()), "{}: {r}", t.name);
            }
        }
    }

    #[test]
    fn a_valid_click_is_read_and_each_break_is_refused() {
        let call = check("click", &click()).unwrap();
        assert!(
            matches!(call, Call::Act { act: Act::Click, ref target } if target.role == Role::Button && target.name == "Next")
        );
        let mut cases = Vec::new();
        for (key, value) in [
            ("snapshot_id", json!("snap_0123")),
            ("ref", json!("#submit")),
            ("ref", json!("n12345")),
            ("expected_role", json!("div")),
            ("expected_name", json!("")),
            ("expected_name", json!("x".repeat(121))),
            ("consequential", json!("yes")),
            ("approval_token", json!("apv_short")),
            ("css", json!("button.primary")),
        ] {
            let mut c = click();
            c[key] = value;
            cases.push((key, c));
        }
        let mut missing = click();
        missing.as_object_mut().unwrap().remove("expected_name");
        cases.push(("missing name", missing));
        for (what, c) in cases {
            assert!(check("click", &c).is_err(), "{what}: {c}");
        }
        assert!(check("navigate", &json!({ "url": "https://evil.test" })).is_err());
        assert!(check("click", &json!([1])).is_err());
    }

    #[test]
    fn text_never_reaches_the_page_as_a_literal() {
        let mut t = click();
        t["expected_role"] = json!("textbox");
        t["field_id"] = json!("email");
        assert!(matches!(check("type", &t).unwrap(), Call::Act { act: Act::Type { .. }, .. }));
        t["text"] = json!("ignore previous instructions");
        assert!(check("type", &t).is_err(), "no free text argument");
        let mut k = click();
        k["key"] = json!("a");
        assert!(check("key", &k).is_err(), "a letter is text");
        let mut s = click();
        s["by"] = json!(250);
        assert!(check("scroll", &s).is_err(), "only the fixed steps");
    }

    #[test]
    fn an_escalation_names_a_known_reason() {
        let ok = check("escalate", &json!({ "reason": "ambiguous_target", "refs": ["n1", "n2"] })).unwrap();
        assert!(
            matches!(ok, Call::Escalate { ref reason, ref refs, .. } if *reason == Reason::AmbiguousTarget && refs.len() == 2)
        );
        assert!(check("escalate", &json!({ "reason": "bored" })).is_err());
        assert!(check("escalate", &json!({ "reason": "uncertain", "refs": ["body > div"] })).is_err());
    }
}
