//! The field table: one limit for every field of every request either service takes, keyed by
//! the field's full protobuf name. The checker (`checked`) refuses a request field with no entry,
//! and a test walks the descriptors so that a new field without a limit fails the build's tests.
//!
//! Lengths of strings are in characters, of bytes in bytes. The record's limits stand where it
//! has them: names and ids 120, label sources 1,024 (the runtime's cut), keys and scroll steps
//! the classifier's closed sets.

use classifier::SUBMIT_METHODS;
use classifier::coverage::{KEYS, MAX_LABEL_CHARS, MAX_OPTIONS, SCROLL_STEPS};

/// What one field may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Characters of a string, bytes of a bytes field; unused for other kinds.
    pub max_len: usize,
    /// Items of a repeated field; 1 for a singular one.
    pub max_items: usize,
    pub allowed: Allowed,
}

/// The values a field may take beyond its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    Any,
    /// A closed set of integers (the scroll steps).
    Ints(&'static [i32]),
    /// An inclusive range of integers.
    Range(u64, u64),
    /// A closed set of strings (the named keys); the empty string means unset.
    Strs(&'static [&'static str]),
}

/// Ids: sessions, runs, tool calls, snapshots, refs, profiles (the ledger's stream-name bound).
pub const MAX_ID_CHARS: usize = 120;
/// An accessible name the worker expects, as the tool contract bounds it.
pub const MAX_NAME_CHARS: usize = 120;
/// The alert regions an observation carries, and the characters of each: page text, bounded.
pub const MAX_ALERTS: usize = 8;
pub const MAX_ALERT_CHARS: usize = 300;
/// What a run's account holds: the refs an escalation cites, the screenshots it names, and the
/// characters of its text (an evidence line, or what the model said of its escalation).
pub const MAX_CITED_REFS: usize = 8;
pub const MAX_SCREENSHOTS: usize = 16;
pub const MAX_ACCOUNT_CHARS: usize = 400;
/// An evidence line an MCP client sends as an argument: recorded as a step's account.
pub const MAX_EVIDENCE_CHARS: usize = MAX_ACCOUNT_CHARS;
/// A character that ends a line, reorders it or hides in it: controls, the line and paragraph
/// separators, bidirectional overrides and isolates, zero-width and other invisible format
/// characters. Text shown as one line (a page string to a model, a worker's account to an owner)
/// escapes or refuses them.
pub fn hidden_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}' | '\u{08E2}'
            | '\u{115F}' | '\u{1160}' | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{2800}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}' | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}')
}

/// The most of a page's dialog text the owner is shown (and names back in an answer).
pub const MAX_DIALOG_CHARS: usize = 1_024;

/// A page URL or a start URL. Longer URLs exist, but no page this product acts on needs one.
pub const MAX_URL_CHARS: usize = 8_192;
/// An origin, `https://host[:port]`: a host name is at most 253 characters.
pub const MAX_ORIGIN_CHARS: usize = 512;
/// A short vocabulary word: a role, a version, a time, a consequence.
pub const MAX_WORD_CHARS: usize = 64;
/// A tool's name as the model called it.
pub const MAX_TOOL_CHARS: usize = 200;
/// Text a type action says it types. A grant covers far less (the classifier's per-act cap and
/// the grant's budget), but a longer record value may still be typed once with the owner's
/// approval.
pub const MAX_TEXT_ACT_CHARS: usize = 16_384;
/// The label sources of one kind an element carries (label elements, aria-labelledby targets).
pub const MAX_LABEL_SOURCES: usize = 64;
/// Navigation targets of one element (its link or form, those inside it, its label's control).
pub const MAX_NAV_TARGETS: usize = 256;
/// The tool calls of one model turn.
pub const MAX_TURN_TOOL_CALLS: usize = 256;
/// Origins one run may act on.
pub const MAX_ORIGINS: usize = 16;
/// The harness step budget.
pub const MAX_STEPS: u64 = 10_000;
/// The longest an agent credential an owner makes lives: a day.
pub const MAX_AGENT_MINUTES: u64 = 1_440;
/// The longest task goal or subgoal the owner may write, and how many subgoals one task has.
pub const MAX_GOAL_CHARS: usize = 500;
pub const MAX_SUBGOALS: usize = 20;

// The ids' formats are `ids.rs`'s; their lengths are named here too, beside every other limit.
pub use crate::ids::{
    APPROVAL_TOKEN_HEX, APPROVAL_TOKEN_LEN, APPROVAL_TOKEN_PREFIX, MAX_FIELD_ID_LEN, approval_token, check_field_id,
    is_approval_token,
};

/// A sealing key's id: a short name an operator picks (`2026-12`, `k2`).
pub const MAX_KEY_ID_CHARS: usize = 32;
/// A seal's MAC: HMAC-SHA256.
pub const MAC_BYTES: usize = 32;
/// A dispatch ticket's encoded body: ids, one option or field id, and a constraint fit well
/// inside.
pub const MAX_TICKET_BODY_BYTES: usize = 8 * 1024;
/// An encoded facts body: the element's facts at their budget, the page's URL and title, ids.
pub const MAX_FACTS_BODY_BYTES: usize = MAX_FACTS_BYTES + 64 * 1024;
/// A form's read-back, sealed: far above any form a person reviews, within an Authorize's
/// decode bound. The runtime refuses to seal a larger one.
pub const MAX_FORM_BODY_BYTES: usize = 64 * 1024;
/// An encoded record text: the longest text a type may say it types, and ids.
pub const MAX_TEXT_BODY_BYTES: usize = 4 * MAX_TEXT_ACT_CHARS + 4 * 1024;

/// The most one element's facts take encoded: the runtime drops options past it (and marks the
/// facts cut, so nothing covers the element), since a select's options alone could reach
/// megabytes within the per-field limits.
pub const MAX_FACTS_BYTES: usize = 1024 * 1024;
/// The largest request the authorizer decodes: the facts at their budget and every other field
/// at its limit fit (`proto/tests/limits.rs` computes it from the table).
pub const MAX_AUTHORIZER_REQUEST_BYTES: usize = 2 * 1024 * 1024;
/// The largest request the runtime decodes: every runtime request at its limits fits.
pub const MAX_RUNTIME_REQUEST_BYTES: usize = 128 * 1024;

const fn text(max_len: usize) -> Rule {
    Rule { max_len, max_items: 1, allowed: Allowed::Any }
}

const fn texts(max_items: usize, max_len: usize) -> Rule {
    Rule { max_len, max_items, allowed: Allowed::Any }
}

const fn one() -> Rule {
    Rule { max_len: 0, max_items: 1, allowed: Allowed::Any }
}

const fn many(max_items: usize) -> Rule {
    Rule { max_len: 0, max_items, allowed: Allowed::Any }
}

const ID: Rule = text(MAX_ID_CHARS);
const LABEL: Rule = text(MAX_LABEL_CHARS);
const URL: Rule = text(MAX_URL_CHARS);
const WORD: Rule = text(MAX_WORD_CHARS);
const KEY: Rule = Rule { max_len: MAX_WORD_CHARS, max_items: 1, allowed: Allowed::Strs(KEYS) };
const METHOD: Rule = Rule { max_len: MAX_WORD_CHARS, max_items: 1, allowed: Allowed::Strs(&SUBMIT_METHODS) };
const SCROLL: Rule = Rule { max_len: 0, max_items: 1, allowed: Allowed::Ints(&SCROLL_STEPS) };
const TOKEN: Rule = text(APPROVAL_TOKEN_LEN);
/// A UUID in its 36-character form.
const UUID: Rule = text(36);

/// Every field of every request message, and of every message a request holds.
pub const FIELDS: &[(&str, Rule)] = &[
    // grant_ledger.v1
    ("grant_ledger.v1.Position.tx_id", one()),
    ("grant_ledger.v1.Position.position", one()),
    ("grant_ledger.v1.CreateSessionRequest.session_id", ID),
    ("grant_ledger.v1.CreateSessionRequest.browser_profile_id", ID),
    ("grant_ledger.v1.CreateSessionRequest.schedule_id", ID),
    ("grant_ledger.v1.CreateSessionRequest.surface", one()),
    ("grant_ledger.v1.RecordMessageRequest.session_id", ID),
    ("grant_ledger.v1.RecordMessageRequest.message_id", ID),
    ("grant_ledger.v1.RecordMessageRequest.from_owner", one()),
    ("grant_ledger.v1.RecordRunRequest.session_id", ID),
    ("grant_ledger.v1.RecordRunRequest.run_id", ID),
    ("grant_ledger.v1.RecordRunRequest.kind", one()),
    ("grant_ledger.v1.RecordRunRequest.detail", WORD),
    ("grant_ledger.v1.RecordRunRequest.account", one()),
    ("grant_ledger.v1.RunAccount.refs", texts(MAX_CITED_REFS, MAX_ID_CHARS)),
    ("grant_ledger.v1.RunAccount.text", text(MAX_ACCOUNT_CHARS)),
    ("grant_ledger.v1.RunAccount.snapshot_id", ID),
    ("grant_ledger.v1.RunAccount.screenshots", texts(MAX_SCREENSHOTS, 71)),
    ("grant_ledger.v1.RunAccount.step", Rule { max_len: 0, max_items: 1, allowed: Allowed::Range(0, MAX_STEPS) }),
    ("grant_ledger.v1.RunAccount.result", WORD),
    ("grant_ledger.v1.RunAccount.elapsed_ms", one()),
    ("grant_ledger.v1.RunAccount.model_ms", one()),
    ("grant_ledger.v1.RecordToolCallRequest.session_id", ID),
    ("grant_ledger.v1.RecordToolCallRequest.tool_call_id", ID),
    ("grant_ledger.v1.RecordToolCallRequest.tool", text(MAX_TOOL_CHARS)),
    ("grant_ledger.v1.DeleteSessionRequest.session_id", ID),
    ("grant_ledger.v1.StopSessionRequest.session_id", ID),
    ("grant_ledger.v1.CheckStopRequest.session_id", ID),
    ("grant_ledger.v1.CheckStopRequest.ticket", one()),
    ("grant_ledger.v1.ConnectAgentRequest.session_id", ID),
    ("grant_ledger.v1.ConnectAgentRequest.browser_only", one()),
    (
        "grant_ledger.v1.ConnectAgentRequest.minutes",
        Rule { max_len: 0, max_items: 1, allowed: Allowed::Range(1, MAX_AGENT_MINUTES) },
    ),
    ("grant_ledger.v1.ConnectAgentRequest.start_url", URL),
    ("grant_ledger.v1.ListAgentsRequest.session_id", ID),
    ("grant_ledger.v1.StartTaskRequest.session_id", ID),
    ("grant_ledger.v1.StartTaskRequest.message_id", ID),
    ("grant_ledger.v1.StartTaskRequest.goal", text(MAX_GOAL_CHARS)),
    ("grant_ledger.v1.StartTaskRequest.subgoals", texts(MAX_SUBGOALS, MAX_GOAL_CHARS)),
    ("grant_ledger.v1.StartTaskRequest.start_url", URL),
    ("grant_ledger.v1.ContinueTaskRequest.session_id", ID),
    ("grant_ledger.v1.ContinueTaskRequest.message_id", ID),
    ("grant_ledger.v1.ClaimTaskRequest.holder", ID),
    ("grant_ledger.v1.RenewTaskRequest.session_id", ID),
    ("grant_ledger.v1.RenewTaskRequest.run_id", ID),
    ("grant_ledger.v1.RenewTaskRequest.holder", ID),
    ("grant_ledger.v1.DisconnectAgentRequest.credential_id", ID),
    ("grant_ledger.v1.ProfileEventRequest.profile_id", ID),
    ("grant_ledger.v1.ProfileEventRequest.event", one()),
    ("grant_ledger.v1.ProfileEventRequest.owner_principal_id", ID),
    ("grant_ledger.v1.SelectOption.value", LABEL),
    ("grant_ledger.v1.SelectOption.label", LABEL),
    ("grant_ledger.v1.SelectOption.text", LABEL),
    ("grant_ledger.v1.SelectOption.name", LABEL),
    ("grant_ledger.v1.SelectOption.title", LABEL),
    ("grant_ledger.v1.SelectOption.group_label", LABEL),
    ("grant_ledger.v1.ElementFacts.role", WORD),
    ("grant_ledger.v1.ElementFacts.name", LABEL),
    ("grant_ledger.v1.ElementFacts.aria_label", LABEL),
    ("grant_ledger.v1.ElementFacts.labelledby", texts(MAX_LABEL_SOURCES, MAX_LABEL_CHARS)),
    ("grant_ledger.v1.ElementFacts.labels", texts(MAX_LABEL_SOURCES, MAX_LABEL_CHARS)),
    ("grant_ledger.v1.ElementFacts.title", LABEL),
    ("grant_ledger.v1.ElementFacts.placeholder", LABEL),
    ("grant_ledger.v1.ElementFacts.alt", LABEL),
    ("grant_ledger.v1.ElementFacts.value", LABEL),
    ("grant_ledger.v1.ElementFacts.visible_text", LABEL),
    ("grant_ledger.v1.ElementFacts.dialog_name", LABEL),
    ("grant_ledger.v1.ElementFacts.field_kind", one()),
    // One more than the classifier reads: the runtime carries that many to say "too many".
    ("grant_ledger.v1.ElementFacts.options", many(MAX_OPTIONS + 1)),
    ("grant_ledger.v1.ElementFacts.nav_targets", texts(MAX_NAV_TARGETS, MAX_LABEL_CHARS)),
    ("grant_ledger.v1.ElementFacts.download", one()),
    ("grant_ledger.v1.ElementFacts.disabled", one()),
    ("grant_ledger.v1.ElementFacts.truncated", one()),
    ("grant_ledger.v1.ElementFacts.nav_targets_carried", one()),
    ("grant_ledger.v1.ElementFacts.submits_form", one()),
    ("grant_ledger.v1.ElementFacts.opens_window", one()),
    ("grant_ledger.v1.ElementFacts.submit_method", METHOD),
    ("grant_ledger.v1.Action.kind", one()),
    ("grant_ledger.v1.Action.text", text(MAX_TEXT_ACT_CHARS)),
    ("grant_ledger.v1.Action.key", KEY),
    ("grant_ledger.v1.Action.option", LABEL),
    ("grant_ledger.v1.Action.scroll_by", SCROLL),
    ("grant_ledger.v1.Action.field_id", ID),
    ("grant_ledger.v1.RunContext.run_id", ID),
    ("grant_ledger.v1.RunContext.interactive", one()),
    ("grant_ledger.v1.RunContext.top_level", one()),
    ("grant_ledger.v1.AuthorizeRequest.session_id", ID),
    ("grant_ledger.v1.AuthorizeRequest.run", one()),
    ("grant_ledger.v1.AuthorizeRequest.tool_call_id", ID),
    ("grant_ledger.v1.AuthorizeRequest.turn_tool_calls", texts(MAX_TURN_TOOL_CALLS, MAX_TOOL_CHARS)),
    ("grant_ledger.v1.AuthorizeRequest.agent_version", ID),
    ("grant_ledger.v1.AuthorizeRequest.element", one()),
    ("grant_ledger.v1.AuthorizeRequest.page_url", URL),
    ("grant_ledger.v1.AuthorizeRequest.page_title", LABEL),
    ("grant_ledger.v1.AuthorizeRequest.action", one()),
    ("grant_ledger.v1.AuthorizeRequest.snapshot_id", ID),
    ("grant_ledger.v1.AuthorizeRequest.node_ref", ID),
    ("grant_ledger.v1.AuthorizeRequest.facts", one()),
    ("grant_ledger.v1.AuthorizeRequest.text", one()),
    ("grant_ledger.v1.AuthorizeRequest.form", one()),
    ("grant_ledger.v1.SealedForm.key_id", text(MAX_KEY_ID_CHARS)),
    ("grant_ledger.v1.SealedForm.body", text(MAX_FORM_BODY_BYTES)),
    ("grant_ledger.v1.SealedForm.mac", text(MAC_BYTES)),
    ("grant_ledger.v1.SealedText.key_id", text(MAX_KEY_ID_CHARS)),
    ("grant_ledger.v1.SealedText.body", text(MAX_TEXT_BODY_BYTES)),
    ("grant_ledger.v1.SealedText.mac", text(MAC_BYTES)),
    ("grant_ledger.v1.SealedFacts.key_id", text(MAX_KEY_ID_CHARS)),
    ("grant_ledger.v1.SealedFacts.body", text(MAX_FACTS_BODY_BYTES)),
    ("grant_ledger.v1.SealedFacts.mac", text(MAC_BYTES)),
    ("grant_ledger.v1.ResolveApprovalRequest.approval_id", UUID),
    ("grant_ledger.v1.ResolveApprovalRequest.resolution", one()),
    ("grant_ledger.v1.ResolveApprovalRequest.offered_origin", text(MAX_ORIGIN_CHARS)),
    ("grant_ledger.v1.ResolveApprovalRequest.offered_path_prefix", LABEL),
    ("grant_ledger.v1.GetApprovalRequest.approval_id", UUID),
    ("grant_ledger.v1.GetApprovalRequest.min_position", one()),
    ("grant_ledger.v1.AwaitApprovalRequest.session_id", ID),
    ("grant_ledger.v1.AwaitApprovalRequest.approval_id", UUID),
    ("grant_ledger.v1.AwaitApprovalRequest.wait_ms", one()),
    ("grant_ledger.v1.ListApprovalsRequest.session_id", ID),
    ("grant_ledger.v1.ListApprovalsRequest.pending_only", one()),
    ("grant_ledger.v1.ListApprovalsRequest.min_position", one()),
    ("grant_ledger.v1.RedeemTokenRequest.approval_token", TOKEN),
    ("grant_ledger.v1.RedeemTokenRequest.run_id", ID),
    ("grant_ledger.v1.RedeemTokenRequest.snapshot_id", ID),
    ("grant_ledger.v1.RedeemTokenRequest.node_ref", ID),
    ("grant_ledger.v1.RedeemTokenRequest.action", one()),
    ("grant_ledger.v1.RedeemTokenRequest.text_sha256", text(32)),
    ("grant_ledger.v1.RedeemTokenRequest.browser_profile_id", ID),
    ("grant_ledger.v1.RedeemTokenRequest.element_role", WORD),
    ("grant_ledger.v1.RedeemTokenRequest.element_name", LABEL),
    ("grant_ledger.v1.RedeemTokenRequest.page_origin", text(MAX_ORIGIN_CHARS)),
    ("grant_ledger.v1.RedeemTokenRequest.form_digest", text(32)),
    ("grant_ledger.v1.GetGrantRequest.grant_id", UUID),
    ("grant_ledger.v1.GetGrantRequest.min_position", one()),
    ("grant_ledger.v1.ListGrantsRequest.session_id", ID),
    ("grant_ledger.v1.ListGrantsRequest.active_only", one()),
    ("grant_ledger.v1.ListGrantsRequest.min_position", one()),
    ("grant_ledger.v1.RevokeGrantRequest.grant_id", UUID),
    // browser_runtime.v1
    ("browser_runtime.v1.OpenSessionRequest.browser_profile_id", ID),
    ("browser_runtime.v1.OpenSessionRequest.allowed_origins", texts(MAX_ORIGINS, MAX_ORIGIN_CHARS)),
    ("browser_runtime.v1.OpenSessionRequest.start_url", URL),
    (
        "browser_runtime.v1.OpenSessionRequest.max_steps",
        Rule { max_len: 0, max_items: 1, allowed: Allowed::Range(1, MAX_STEPS) },
    ),
    ("browser_runtime.v1.ObserveRequest.session_id", ID),
    ("browser_runtime.v1.ObserveRequest.run_id", ID),
    ("browser_runtime.v1.ActRequest.session_id", ID),
    ("browser_runtime.v1.ActRequest.sequence", one()),
    ("browser_runtime.v1.ActRequest.run_id", ID),
    ("browser_runtime.v1.ActRequest.snapshot_id", ID),
    ("browser_runtime.v1.ActRequest.ref", ID),
    ("browser_runtime.v1.ActRequest.expected_name", text(MAX_NAME_CHARS)),
    ("browser_runtime.v1.ActRequest.expected_role", one()),
    ("browser_runtime.v1.ActRequest.consequential", one()),
    ("browser_runtime.v1.ActRequest.approval_token", TOKEN),
    ("browser_runtime.v1.ActRequest.wait_for", one()),
    ("browser_runtime.v1.ActRequest.ticket", one()),
    ("grant_ledger.v1.DispatchTicket.key_id", text(MAX_KEY_ID_CHARS)),
    ("grant_ledger.v1.DispatchTicket.body", text(MAX_TICKET_BODY_BYTES)),
    ("grant_ledger.v1.DispatchTicket.mac", text(MAC_BYTES)),
    ("browser_runtime.v1.ActRequest.click", one()),
    ("browser_runtime.v1.ActRequest.type", one()),
    ("browser_runtime.v1.ActRequest.select", one()),
    ("browser_runtime.v1.ActRequest.check", one()),
    ("browser_runtime.v1.ActRequest.press", one()),
    ("browser_runtime.v1.ActRequest.scroll", one()),
    ("browser_runtime.v1.Type.field_id", ID),
    ("browser_runtime.v1.Select.option", LABEL),
    ("browser_runtime.v1.Press.key", KEY),
    ("browser_runtime.v1.Scroll.by", SCROLL),
    ("browser_runtime.v1.ScreenshotRequest.session_id", ID),
    ("browser_runtime.v1.LiveViewRequest.browser_profile_id", ID),
    ("browser_runtime.v1.TakeOverRequest.browser_profile_id", ID),
    ("browser_runtime.v1.TakeOverRequest.snapshot_id", ID),
    ("browser_runtime.v1.TakeOverRequest.release", one()),
    ("browser_runtime.v1.LiveViewRequest.snapshot_id", ID),
    ("browser_runtime.v1.LiveViewRequest.node_ref", ID),
    ("browser_runtime.v1.LiveInputRequest.snapshot_id", ID),
    ("browser_runtime.v1.LiveInputRequest.browser_profile_id", ID),
    ("browser_runtime.v1.LiveInputRequest.click", one()),
    ("browser_runtime.v1.Point.x", one()),
    ("browser_runtime.v1.Point.y", one()),
    ("browser_runtime.v1.LiveInputRequest.text", text(1024)),
    ("browser_runtime.v1.LiveInputRequest.key", text(32)),
    ("browser_runtime.v1.LiveInputRequest.done", one()),
    ("browser_runtime.v1.LiveInputRequest.expected_page", URL),
    ("browser_runtime.v1.LiveInputRequest.answer", one()),
    ("browser_runtime.v1.DialogAnswer.accept", one()),
    ("browser_runtime.v1.DialogAnswer.text", text(1024)),
    ("browser_runtime.v1.DialogAnswer.seen", text(MAX_DIALOG_CHARS)),
    ("browser_runtime.v1.ReadFormRequest.session_id", ID),
    ("browser_runtime.v1.ReadFormRequest.snapshot_id", ID),
    ("browser_runtime.v1.ReadFormRequest.ref", ID),
    ("browser_runtime.v1.ReadFormRequest.run_id", ID),
    ("browser_runtime.v1.CloseSessionRequest.session_id", ID),
];

/// The rule of the field named `full_name` (`package.Message.field`).
pub fn rule(full_name: &str) -> Option<Rule> {
    FIELDS.iter().find(|(name, _)| *name == full_name).map(|(_, r)| *r)
}
