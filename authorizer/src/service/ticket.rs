//! Dispatch tickets: every allow, sealed for the one act it allows. The runtime dispatches
//! nothing without one, checks it on its own, asks `CheckStop` last for the owner's Stop, and
//! dispatches it at most once.

use grant_domain::catalogue::{AuthorizationKind, BoundAction};
use proto::ticket::Keyring;
use proto::v1 as pb;
use time::{Duration, OffsetDateTime};

/// How long a ticket lasts: long enough for the act that follows its decision, too short to be
/// saved for later.
pub const TICKET_LIFETIME: Duration = Duration::seconds(60);

/// What one ticket binds, before it is sealed.
#[derive(Debug)]
pub(super) struct Allowed<'a> {
    /// The same for every answer to one decision (a retried call's ticket is the same ticket).
    pub ticket_id: String,
    pub tenant_id: &'a str,
    pub principal_id: &'a str,
    pub session_id: &'a str,
    pub profile: &'a str,
    pub run_id: &'a str,
    pub snapshot_id: &'a str,
    pub node_ref: &'a str,
    pub action: &'a BoundAction,
    pub kind: AuthorizationKind,
    pub grant_id: Option<String>,
    pub use_ordinal: Option<u32>,
    pub approval_id: Option<String>,
    pub constraint: Option<pb::DispatchConstraint>,
    /// The grant's or the card's own end: the ticket never outlives it.
    pub until: Option<OffsetDateTime>,
}

/// `allowed`, decided at `decided`, sealed by the tenant's ticket key. Its life runs from the
/// decision, so a retried call answered later gets no longer to use it.
pub(super) fn seal(keys: &Keyring, allowed: Allowed<'_>, decided: OffsetDateTime) -> pb::DispatchTicket {
    let not_after = allowed.until.map_or(decided + TICKET_LIFETIME, |u| u.min(decided + TICKET_LIFETIME));
    let ms = super::convert::unix_ms;
    let body = pb::TicketBody {
        ticket_id: allowed.ticket_id,
        tenant_id: allowed.tenant_id.to_owned(),
        principal_id: allowed.principal_id.to_owned(),
        session_id: allowed.session_id.to_owned(),
        browser_profile_id: allowed.profile.to_owned(),
        run_id: allowed.run_id.to_owned(),
        snapshot_id: allowed.snapshot_id.to_owned(),
        node_ref: allowed.node_ref.to_owned(),
        action: Some(action(allowed.action)),
        authorization_kind: allowed.kind.code().to_owned(),
        grant_id: allowed.grant_id.unwrap_or_default(),
        use_ordinal: allowed.use_ordinal.unwrap_or_default(),
        not_after_ms: ms(not_after),
        constraint: allowed.constraint,
        approval_id: allowed.approval_id.unwrap_or_default(),
        element_role: allowed.action.element_role.clone(),
        element_name: allowed.action.element_name.clone(),
        page_origin: allowed.action.page_origin.clone(),
        decided_ms: ms(decided),
    };
    keys.seal(&body)
}

/// The act as the ticket carries it.
fn action(a: &BoundAction) -> pb::TicketAction {
    use pb::ActionKind as K;
    let kind = match a.kind.as_str() {
        "click" => K::Click,
        "type" => K::Type,
        "select" => K::Select,
        "check" => K::Check,
        "press" => K::Press,
        "scroll" => K::Scroll,
        _ => K::Unspecified,
    };
    let argument = a.argument.clone();
    let mut t = pb::TicketAction { kind: kind as i32, ..Default::default() };
    match kind {
        K::Type => t.field_id = argument,
        K::Select => t.option = argument,
        K::Press => t.key = argument,
        K::Scroll => t.scroll_by = argument.parse().unwrap_or_default(),
        K::Click | K::Check | K::Unspecified => {}
    }
    let bytes = |d: Option<&str>| {
        d.and_then(|d| d.split_once(':').map(|(_, hex)| hex)).and_then(|h| hex::decode(h).ok()).unwrap_or_default()
    };
    t.text_sha256 = bytes(a.text_sha256.as_deref());
    t.form_digest = bytes(a.form_sha256.as_deref());
    t
}
