//! The authorizer's dispatch ticket, checked here on its own: sealed for this tenant, for this
//! session's owner and profile, for this run, snapshot, ref and act, not expired. A ticket that
//! fails any of these but its age is a policy violation (APPROVAL_TOKEN_INVALID, terminal);
//! one only expired is cured by authorizing again ([`Refusal::retryable`]).

use classifier::constraint::{DispatchConstraint, GrantKind, WireConstraint};
use proto::ticket::Keyring;
use proto::v1 as gl;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::session::ActAction;

/// Why a ticket is refused. Whether authorizing again may cure it is the variant's, not a
/// comparison of words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Fine in every way but its age: the one refusal the agent may cure, by authorizing again.
    #[error("the ticket has expired: authorize the act again")]
    Expired,
    /// Dispatched already: a ticket allows one act.
    #[error("the ticket was dispatched already")]
    Spent,
    /// Sealed for something else, or not by a key of the ring: a policy violation.
    #[error("{0}")]
    Invalid(String),
}

impl Refusal {
    /// Whether authorizing the act again may cure it (APPROVAL_REQUIRED); otherwise terminal
    /// (APPROVAL_TOKEN_INVALID).
    pub fn retryable(&self) -> bool {
        matches!(self, Refusal::Expired)
    }

    /// The closed label the refusal is counted under.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Expired => "expired",
            Refusal::Spent => "spent",
            Refusal::Invalid(_) => "invalid",
        }
    }
}

impl From<String> for Refusal {
    fn from(why: String) -> Self {
        Refusal::Invalid(why)
    }
}

impl From<&str> for Refusal {
    fn from(why: &str) -> Self {
        Refusal::Invalid(why.to_owned())
    }
}

/// What a checked ticket allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticketed {
    pub ticket_id: String,
    /// The grant's constraint; `None` for an approval the owner gave for this very act.
    pub constraint: Option<DispatchConstraint>,
    /// The keyed digest of the form the decision read back, for an act that could submit one:
    /// the live form must digest the same when the act is sent.
    pub form_digest: Option<Vec<u8>>,
    /// The ticket as sealed: the authorizer reads the owner's Stop for it last ([`crate::session::Redeem::check_stop`]).
    pub sealed: gl::DispatchTicket,
}

/// What the act in hand is, for the ticket to match.
#[derive(Debug)]
pub struct Expected<'a> {
    pub tenant: &'a str,
    pub principal: &'a str,
    pub profile: &'a str,
    pub run_id: &'a str,
    pub snapshot_id: &'a str,
    pub node_ref: &'a str,
    pub action: &'a ActAction,
    /// The record value a type would type.
    pub text: Option<&'a str>,
    /// The live node's role and name as the snapshot's facts carry them, and the page's origin.
    pub element_role: &'a str,
    pub element_name: &'a str,
    pub page_origin: &'a str,
    pub now: OffsetDateTime,
}

/// The ticket's allowance if it was sealed for exactly `expected`; otherwise why not.
pub fn check(keys: &Keyring, ticket: &gl::DispatchTicket, expected: &Expected<'_>) -> Result<Ticketed, Refusal> {
    let body = keys.open(expected.tenant, ticket).map_err(|e| e.to_string())?;
    let bound = [
        ("owner", body.principal_id.as_str(), expected.principal),
        ("browser profile", &body.browser_profile_id, expected.profile),
        ("run", &body.run_id, expected.run_id),
        ("snapshot", &body.snapshot_id, expected.snapshot_id),
        ("ref", &body.node_ref, expected.node_ref),
        ("element role", &body.element_role, expected.element_role),
        ("element name", &body.element_name, expected.element_name),
        ("page origin", &body.page_origin, expected.page_origin),
    ];
    if let Some((what, _, _)) = bound.iter().find(|(_, got, want)| got != want) {
        return Err(format!("the ticket was issued for another {what}").into());
    }
    let action = body.action.as_ref().ok_or("the ticket names no act")?;
    same_act(keys, expected.tenant, action, expected.action, expected.text)?;
    let constraint = match (body.authorization_kind.as_str(), body.constraint) {
        ("approval", None) => None,
        (kind @ ("standing_grant" | "browser_task_grant"), Some(c)) => {
            let c = constraint(c).map_err(|why| format!("the ticket's constraint: {why}"))?;
            let expected_kind = if kind == "browser_task_grant" { GrantKind::Task } else { GrantKind::Standing };
            if c.kind != expected_kind {
                return Err("the ticket's constraint is not its grant's kind".into());
            }
            Some(c)
        }
        _ => return Err("the ticket's authorization does not fit its constraint".into()),
    };
    // Last: only a ticket that fits in every other way is one that authorizing again renews.
    let now_ms = expected.now.unix_timestamp_nanos() / 1_000_000;
    if i128::from(body.not_after_ms) <= now_ms {
        return Err(Refusal::Expired);
    }
    let form_digest = Some(action.form_digest.clone()).filter(|d| !d.is_empty());
    Ok(Ticketed { ticket_id: body.ticket_id, constraint, form_digest, sealed: ticket.clone() })
}

/// The act the ticket names is the act in hand: its kind, its argument, and for a type the text
/// (its keyed digest under any key of the ring).
fn same_act(
    keys: &Keyring,
    tenant: &str,
    bound: &gl::TicketAction,
    act: &ActAction,
    text: Option<&str>,
) -> Result<(), String> {
    let here = ticket_action(act, None);
    let same_but_text =
        gl::TicketAction { text_sha256: bound.text_sha256.clone(), form_digest: bound.form_digest.clone(), ..here };
    if *bound != same_but_text {
        return Err("the ticket was issued for another act".into());
    }
    let fits = match act {
        ActAction::Type { .. } => keys.digest_fits(tenant, text.unwrap_or_default(), &bound.text_sha256),
        _ => bound.text_sha256.is_empty(),
    };
    if fits { Ok(()) } else { Err("the record value is not the text the authorizer was shown".into()) }
}

/// The constraint as the authorizer sealed it, held to the rules of its kind.
pub fn constraint(c: gl::DispatchConstraint) -> Result<DispatchConstraint, String> {
    let kind = match gl::GrantKind::try_from(c.grant_kind) {
        Ok(gl::GrantKind::Task) => GrantKind::Task,
        Ok(gl::GrantKind::Standing) => GrantKind::Standing,
        _ => return Err("its grant kind is neither task nor standing".into()),
    };
    let not_after = OffsetDateTime::parse(&c.not_after, &Rfc3339).map_err(|_| "its end is not an RFC 3339 time")?;
    DispatchConstraint::from_wire(WireConstraint {
        kind,
        origins: c.origins,
        path_prefix: c.path_prefix,
        not_after,
        consequence_ceiling: c.consequence_ceiling,
        max_text_chars: c.max_text_chars,
    })
    .map_err(|e| e.to_string())
}

/// The body a ticket for exactly this act carries, decided at `expected.now` in chat
/// `session_id`: what the authorizer seals for it. The bench and the tests seal it with keys of
/// their own, standing in for the authorizer.
pub fn body_for(
    keys: &Keyring,
    expected: &Expected<'_>,
    (ticket_id, session_id): (&str, &str),
    constraint: Option<gl::DispatchConstraint>,
    not_after: OffsetDateTime,
) -> gl::TicketBody {
    let ms = |t: OffsetDateTime| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
    let kind = match constraint.as_ref().map(|c| gl::GrantKind::try_from(c.grant_kind)) {
        None => "approval",
        Some(Ok(gl::GrantKind::Task)) => "browser_task_grant",
        Some(_) => "standing_grant",
    };
    gl::TicketBody {
        ticket_id: ticket_id.to_owned(),
        tenant_id: expected.tenant.to_owned(),
        principal_id: expected.principal.to_owned(),
        session_id: session_id.to_owned(),
        browser_profile_id: expected.profile.to_owned(),
        run_id: expected.run_id.to_owned(),
        snapshot_id: expected.snapshot_id.to_owned(),
        node_ref: expected.node_ref.to_owned(),
        action: Some(ticket_action(expected.action, expected.text.map(|t| keys.text_digest(expected.tenant, t)))),
        element_role: expected.element_role.to_owned(),
        element_name: expected.element_name.to_owned(),
        page_origin: expected.page_origin.to_owned(),
        authorization_kind: kind.to_owned(),
        not_after_ms: ms(not_after),
        decided_ms: ms(expected.now),
        constraint,
        ..Default::default()
    }
}

/// `act` as a ticket names it, with the keyed digest of the text a type types.
pub fn ticket_action(act: &ActAction, digest: Option<Vec<u8>>) -> gl::TicketAction {
    use gl::ActionKind as K;
    let kind = |k: K| gl::TicketAction { kind: k as i32, ..Default::default() };
    match act {
        ActAction::Click => kind(K::Click),
        ActAction::Type { field_id } => {
            gl::TicketAction { field_id: field_id.clone(), text_sha256: digest.unwrap_or_default(), ..kind(K::Type) }
        }
        ActAction::Select { option } => gl::TicketAction { option: option.clone(), ..kind(K::Select) },
        ActAction::Check => kind(K::Check),
        ActAction::Press { key } => gl::TicketAction { key: key.clone(), ..kind(K::Press) },
        ActAction::Scroll { by } => gl::TicketAction { scroll_by: *by, ..kind(K::Scroll) },
    }
}
