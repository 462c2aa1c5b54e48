//! The JSON of the owner's routes, and its conversion from the authorizer's messages. Every
//! string marked "from the website" is the page's own text: a client shows it quoted, labelled
//! as the website's, and escaped.

use proto::v1 as pb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::problem::Problem;

/// Where a write reached in the ledger. A read given it as `min_position=<tx_id>.<position>`
/// reflects that write, through any replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Position {
    pub tx_id: u64,
    pub position: u64,
}

impl Position {
    pub fn from_pb(p: Option<pb::Position>) -> Option<Self> {
        p.map(|p| Self { tx_id: p.tx_id, position: p.position })
    }

    /// Parses `<tx_id>.<position>`.
    pub fn parse(text: &str) -> Result<Self, Problem> {
        let bad = || Problem::invalid("min_position", "is <tx_id>.<position>, two whole numbers, as a write answered");
        let (tx, pos) = text.split_once('.').ok_or_else(bad)?;
        let whole =
            |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten();
        Ok(Self { tx_id: whole(tx).ok_or_else(bad)?, position: whole(pos).ok_or_else(bad)? })
    }

    pub fn to_pb(self) -> pb::Position {
        pb::Position { tx_id: self.tx_id, position: self.position }
    }
}

/// What an approval card shows of the action it asks about.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ApprovalView {
    /// `click`, `type`, `select`, `check`, `press`, `scroll`.
    pub action_kind: String,
    /// False when the element could no longer be described: the card says so and offers nothing.
    pub describable: bool,
    pub element_role: String,
    /// From the website.
    pub element_name: String,
    /// From the website; empty when it is the name.
    pub visible_text: String,
    /// From the website.
    pub dialog_name: String,
    pub page_origin: String,
    pub page_path: String,
    /// From the website.
    pub page_title: String,
    /// The key, scroll distance, option (from the website) or typed text (`[REDACTED]` for a
    /// secret; cut at 512 characters, then `detail_digest` names the whole).
    pub detail: String,
    pub detail_digest: String,
    /// Server-authored words only.
    pub action_summary: String,
    /// A form's button: the form read back from the live page beside the task record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<Vec<FormRow>>,
    /// Where the act leads, as the runtime read it: besides its own page, the only places it
    /// may reach.
    pub destinations: Vec<Destination>,
    /// Server-authored: what the act reads as, in the owner's words.
    pub reads_as: String,
    /// A consequence was named: the act may not be undone from here.
    pub cannot_undo: bool,
    /// Server-authored: how the act sends the form it submits (POST, GET, a dialog); empty when
    /// it submits none.
    pub sends: String,
    /// The act opens a new window or tab.
    pub new_window: bool,
}

/// One place an act leads to.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Destination {
    /// `https://host[:port]`; empty for an address that is not HTTPS.
    pub origin: String,
    /// From the website: the path, without query or fragment.
    pub path: String,
    /// `same_page`, `same_site`, `leaves_scope`, `sensitive_area`, `another_site`, `anywhere`.
    pub kind: String,
    /// From the website: the sensitive segment, for `sensitive_area`.
    pub segment: String,
    /// Server-authored words for the owner.
    pub words: String,
}

/// One field of a form's read-back.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FormRow {
    /// From the website.
    pub label: String,
    /// From the website: the value in the form (`[REDACTED]` for a sensitive field).
    pub value: String,
    /// The task-record field typed into it and its value; empty for an untouched field.
    pub record_field_id: String,
    pub record_value: String,
    /// `match`, `match_normalised`, `mismatch`, `untouched` (a page default to review),
    /// `redacted` or `chosen` (a box or list the agent set in this run).
    pub status: String,
    /// For `match_normalised`: the rule.
    pub normalisation: String,
}

/// The task permission an approval offers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Offer {
    pub origin: String,
    pub path_prefix: String,
    pub minutes: u32,
    pub max_actions: u32,
    pub max_typed_chars: u32,
    /// Server-authored.
    pub text: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Approval {
    pub approval_id: String,
    pub session_id: String,
    /// `PENDING`, `APPROVED`, `DENIED`, `EXPIRED`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub view: Option<ApprovalView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offer: Option<Offer>,
    /// Why an active task permission did not cover the action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `reason` in the owner's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_text: Option<String>,
    pub expires_at: String,
}

impl From<pb::Approval> for Approval {
    fn from(a: pb::Approval) -> Self {
        Self {
            approval_id: a.approval_id,
            session_id: a.session_id,
            status: a.status,
            view: a.view.map(|v| ApprovalView {
                action_kind: v.action_kind,
                describable: v.describable,
                element_role: v.element_role,
                element_name: v.element_name,
                visible_text: v.visible_text,
                dialog_name: v.dialog_name,
                page_origin: v.page_origin,
                page_path: v.page_path,
                page_title: v.page_title,
                detail: v.detail,
                detail_digest: v.detail_digest,
                action_summary: v.action_summary,
                form: v.form.map(|f| {
                    f.rows
                        .into_iter()
                        .map(|r| FormRow {
                            status: match pb::FormStatus::try_from(r.status) {
                                Ok(pb::FormStatus::Match) => "match",
                                Ok(pb::FormStatus::MatchNormalised) => "match_normalised",
                                Ok(pb::FormStatus::Mismatch) => "mismatch",
                                Ok(pb::FormStatus::Untouched) => "untouched",
                                Ok(pb::FormStatus::Redacted) => "redacted",
                                Ok(pb::FormStatus::Chosen) => "chosen",
                                _ => "unknown",
                            }
                            .into(),
                            label: r.label,
                            value: r.value,
                            record_field_id: r.record_field_id,
                            record_value: r.record_value,
                            normalisation: r.normalisation,
                        })
                        .collect()
                }),
                destinations: v
                    .destinations
                    .into_iter()
                    .map(|d| Destination {
                        origin: d.origin,
                        path: d.path,
                        kind: d.kind,
                        segment: d.segment,
                        words: d.words,
                    })
                    .collect(),
                reads_as: v.reads_as,
                cannot_undo: v.cannot_undo,
                sends: v.sends,
                new_window: v.new_window,
            }),
            offer: a.offer.map(|o| Offer {
                origin: o.origin,
                path_prefix: o.path_prefix,
                minutes: o.minutes,
                max_actions: o.max_actions,
                max_typed_chars: o.max_typed_chars,
                text: o.text,
            }),
            reason_text: Some(&a.reason).filter(|r| !r.is_empty()).map(|r| reason_words(r)),
            reason: Some(a.reason).filter(|r| !r.is_empty()),
            expires_at: a.expires_at,
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Approvals {
    /// Pending first, then the rest; each group by expiry.
    pub approvals: Vec<Approval>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    ApproveOnce,
    ApproveForTask,
    Deny,
    /// Denied to the agent, whose run ends; the owner acts in the live tab.
    TakeOver,
}

impl Resolution {
    /// The answer's spelling on the wire, for a metric's label.
    pub fn code(self) -> &'static str {
        match self {
            Self::ApproveOnce => "approve_once",
            Self::ApproveForTask => "approve_for_task",
            Self::Deny => "deny",
            Self::TakeOver => "take_over",
        }
    }
}

/// The owner's answer to one approval card.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolve {
    pub resolution: Resolution,
    /// For `approve_for_task`: the offer's origin, repeated exactly.
    #[serde(default)]
    pub offered_origin: Option<String>,
    /// For `approve_for_task`: the offer's path prefix, repeated exactly.
    #[serde(default)]
    pub offered_path_prefix: Option<String>,
    /// How long the card was on the owner's screen before this answer, as the console measured
    /// it: logged, since a collapse in dwell time is an incident.
    #[serde(default)]
    pub shown_for_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Resolved {
    /// `APPROVED` or `DENIED`.
    pub status: String,
    /// The task permission `approve_for_task` created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

/// Whether a task permission still covers acts: its one home for the owner's routes and stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrantStatus {
    /// Within its time, with uses left, not ended.
    Active,
    /// Ended, or past its time though the sweep has not yet ended it.
    Ended,
}

/// A task permission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Grant {
    pub grant_id: String,
    pub session_id: String,
    pub origin: String,
    pub path_prefix: String,
    pub created_at: String,
    pub expires_at: String,
    pub actions_used: u32,
    pub max_actions: u32,
    pub chars_used: u32,
    pub max_typed_chars: u32,
    pub status: GrantStatus,
    /// `expired`, `exhausted`, `revoked`, `superseded`, `profile_changed`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<String>,
    /// Whole minutes left, rounded up; 0 once ended.
    pub minutes_left: u32,
}

impl Grant {
    pub fn from_pb(g: pb::TaskGrant, now: OffsetDateTime) -> Self {
        let ends = OffsetDateTime::parse(&g.expires_at, &Rfc3339).ok();
        let ended = !g.end_reason.is_empty() || ends.is_none_or(|t| t <= now);
        let minutes_left = match ends {
            Some(t) if !ended => u32::try_from(((t - now).whole_seconds() + 59) / 60).unwrap_or(0),
            _ => 0,
        };
        Self {
            grant_id: g.grant_id,
            session_id: g.session_id,
            origin: g.origin,
            path_prefix: g.path_prefix,
            created_at: g.created_at,
            expires_at: g.expires_at,
            actions_used: g.actions_used,
            max_actions: g.max_actions,
            chars_used: g.chars_used,
            max_typed_chars: g.max_typed_chars,
            status: if ended { GrantStatus::Ended } else { GrantStatus::Active },
            end_reason: Some(g.end_reason).filter(|r| !r.is_empty()).or_else(|| ended.then(|| "expired".into())),
            minutes_left,
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Grants {
    /// Newest first.
    pub grants: Vec<Grant>,
}

/// What a write answers: how far the ledger got.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Written {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ActivityRow {
    pub position: u64,
    pub recorded_at: String,
    /// The event's type, such as `tool.call.authorized`.
    pub event_type: String,
    /// Who recorded it: the owner who answered a card, or the owner a worker acted for.
    pub principal: String,
    /// How an act was allowed: "Allowed by task permission", "Allowed by the owner", …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<String>,
    /// What happened, with the website's strings quoted as the card quotes them.
    pub summary: String,
    /// The card the row is about: a card, its answer and the act it allowed share it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Activity {
    /// Newest first, at most 200.
    pub rows: Vec<ActivityRow>,
    /// False when `min_position` was given and the activity view had not reached it within the
    /// wait: the rows may be missing that write's effects.
    pub caught_up: bool,
}

/// Who is signed in.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Me {
    pub tenant: String,
    pub principal: String,
    pub scopes: Vec<String>,
    /// `token` (an API token) or `session` (a browser signed in by a link).
    pub signed_in_by: String,
    /// For a browser session: send it as `x-csrf-token` on every write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csrf_token: Option<String>,
}

pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// [`rfc3339`] of milliseconds since the Unix epoch, as the authorizer's `*_ms` fields carry them.
pub(crate) fn rfc3339_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).map(rfc3339).unwrap_or_default()
}

/// What an owner reads for a code that says why a task permission did not cover an act: the
/// words the domain keeps beside the code; an unknown code is shown as it is.
pub fn reason_words(code: &str) -> String {
    match grant_domain::model::NotCovered::from_code(code) {
        Some(reason) => format!("Your task permission does not cover this: {}.", reason.owner_words()),
        None => format!("Your task permission does not cover this ({code})."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse_strictly() {
        assert_eq!(Position::parse("12.345").unwrap(), Position { tx_id: 12, position: 345 });
        for bad in ["", "12", ".3", "1.", "1.2.3", "+1.2", "1.-2", "a.b", "99999999999999999999.1"] {
            assert!(Position::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_grant_counts_minutes_up_and_ends_at_expiry() {
        let now = OffsetDateTime::now_utc();
        let g = |expires: OffsetDateTime, end: &str| pb::TaskGrant {
            expires_at: rfc3339(expires),
            end_reason: end.into(),
            ..Default::default()
        };
        let live = Grant::from_pb(g(now + time::Duration::seconds(61), ""), now);
        assert_eq!((live.status, live.minutes_left, live.end_reason), (GrantStatus::Active, 2, None));
        let past = Grant::from_pb(g(now - time::Duration::seconds(1), ""), now);
        assert_eq!(
            (past.status, past.minutes_left, past.end_reason.as_deref()),
            (GrantStatus::Ended, 0, Some("expired"))
        );
        let revoked = Grant::from_pb(g(now + time::Duration::minutes(5), "revoked"), now);
        assert_eq!((revoked.status, revoked.end_reason.as_deref()), (GrantStatus::Ended, Some("revoked")));
    }
}
