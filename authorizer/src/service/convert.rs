//! The wire conversions: each request field checked into the domain's types, each domain
//! value into its reply message.

use classifier::{Action, ElementFacts};
use grant_domain::catalogue::{ActionView, EndReason, Offer};
use ledger::Checkpoint;
use proto::v1 as pb;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tonic::Status;
use uuid::Uuid;

use crate::constraint::{DispatchConstraint, GrantKind};
use crate::domain::{Approval, Grant};
use crate::view::offer_text;

use super::status::invalid;

/// An id that fits a stream name beside any tenant: the ledger's one rule for entity ids.
pub(super) fn id(field: &'static str, value: &str) -> Result<String, Status> {
    if value.is_empty() {
        return Err(invalid(field, "is required"));
    }
    ledger::check_entity_id(field, value).map_err(|e| invalid(field, &e.reason))?;
    Ok(value.to_owned())
}

pub(super) fn uuid(field: &str, value: &str) -> Result<Uuid, Status> {
    Uuid::parse_str(value).map_err(|_| invalid(field, "is not a UUID"))
}

pub(super) fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

pub(super) fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// `t` as milliseconds since the Unix epoch, as the wire's `*_ms` fields carry it.
pub(super) fn unix_ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

pub(super) fn position(at: Checkpoint) -> Option<pb::Position> {
    Some(pb::Position { tx_id: at.tx_id, position: at.position })
}

/// The worker-side reading of the facts an observation carried: an absent fact means no coverage.
pub(super) fn element(e: pb::ElementFacts) -> Result<ElementFacts, Status> {
    proto::facts::element_facts(e).map_err(|_| invalid("element.field_kind", "unknown value"))
}

/// The action, and the record field a type names (a ticket binds it).
pub(super) fn action_of(a: Option<pb::Action>) -> Result<(Action, Option<String>), Status> {
    use pb::ActionKind as K;
    let a = a.ok_or_else(|| invalid("action", "is required"))?;
    let field_id = match (K::try_from(a.kind), a.field_id.as_str()) {
        (_, "") => None,
        (Ok(K::Type), f) => {
            proto::limits::check_field_id(f).map_err(|why| invalid("action.field_id", &why))?;
            Some(f.to_owned())
        }
        _ => return Err(invalid("action.field_id", "is only for a type")),
    };
    Ok((action(a)?, field_id))
}

fn action(a: pb::Action) -> Result<Action, Status> {
    use pb::ActionKind as K;
    Ok(match K::try_from(a.kind).map_err(|_| invalid("action.kind", "unknown value"))? {
        K::Unspecified => return Err(invalid("action.kind", "is required")),
        K::Click => Action::Click,
        K::Type => Action::Type { text: a.text },
        K::Select if a.option.is_empty() => return Err(invalid("action.option", "is required for select")),
        K::Select => Action::Select { option: a.option },
        K::Check => Action::Check,
        K::Press if a.key.is_empty() => return Err(invalid("action.key", "is required for press")),
        K::Press => Action::Press { key: a.key },
        // proto3 leaves a 0 off the wire, so the codec cannot see it: the step is checked here.
        K::Scroll if !classifier::coverage::SCROLL_STEPS.contains(&a.scroll_by) => {
            let steps: Vec<String> = classifier::coverage::SCROLL_STEPS.iter().map(ToString::to_string).collect();
            return Err(invalid("action.scroll_by", &format!("is one of {}", steps.join(", "))));
        }
        K::Scroll => Action::Scroll { by: a.scroll_by },
    })
}

pub(super) fn view_pb(v: &ActionView) -> pb::ApprovalView {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    pb::ApprovalView {
        action_kind: v.action_kind.clone(),
        describable: v.describable,
        element_role: s(&v.element_role),
        element_name: s(&v.element_name),
        visible_text: s(&v.visible_text),
        dialog_name: s(&v.dialog_name),
        page_origin: s(&v.page_origin),
        page_path: s(&v.page_path),
        page_title: s(&v.page_title),
        detail: s(&v.detail),
        detail_digest: s(&v.detail_digest),
        action_summary: v.action_summary.clone(),
        form: v.form.as_ref().map(form_pb),
        destinations: v
            .destinations
            .iter()
            .map(|d| pb::Destination {
                origin: d.origin.clone(),
                path: d.path.clone(),
                kind: d.kind.code().to_owned(),
                segment: d.segment.clone().unwrap_or_default(),
                words: d.words.clone(),
            })
            .collect(),
        reads_as: v.reads_as.clone(),
        cannot_undo: v.cannot_undo,
        sends: v.sends.clone(),
        new_window: v.new_window,
    }
}

fn form_pb(f: &grant_domain::catalogue::FormReview) -> pb::FormReview {
    use grant_domain::catalogue::FormStatus as S;
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    pb::FormReview {
        rows: f
            .rows
            .iter()
            .map(|r| pb::FormRow {
                label: r.label.clone(),
                kind: classifier::FieldKind::from_code(&r.kind).map_or(0, |k| pb::FieldKind::from(k) as i32),
                value: r.value.clone(),
                record_field_id: s(&r.record_field_id),
                record_value: s(&r.record_value),
                status: match r.status {
                    S::Match => pb::FormStatus::Match,
                    S::MatchNormalised => pb::FormStatus::MatchNormalised,
                    S::Mismatch => pb::FormStatus::Mismatch,
                    S::Untouched => pb::FormStatus::Untouched,
                    S::Chosen => pb::FormStatus::Chosen,
                    S::Redacted => pb::FormStatus::Redacted,
                } as i32,
                normalisation: s(&r.normalisation),
            })
            .collect(),
        // The digest stays with the binding; the card shows the rows.
        digest: Vec::new(),
    }
}

pub(super) fn offer(o: &Offer) -> pb::Offer {
    let place = format!("{}{}", o.scope.origin.trim_start_matches("https://"), o.scope.path_prefix);
    pb::Offer {
        origin: o.scope.origin.clone(),
        path_prefix: o.scope.path_prefix.clone(),
        minutes: o.minutes,
        max_actions: o.max_actions,
        max_typed_chars: o.max_typed_chars,
        text: offer_text(&place, o.minutes, o.max_actions, o.max_typed_chars),
    }
}

pub(super) fn constraint(c: &DispatchConstraint) -> pb::DispatchConstraint {
    pb::DispatchConstraint {
        grant_kind: match c.kind {
            GrantKind::Task => pb::GrantKind::Task as i32,
            GrantKind::Standing => pb::GrantKind::Standing as i32,
        },
        origins: c.origins.clone(),
        path_prefix: c.path_prefix.clone(),
        not_after: rfc3339(c.not_after),
        consequence_ceiling: c.consequence_ceiling().into(),
        max_text_chars: c.max_text_chars(),
    }
}

pub(super) fn approval(a: &Approval) -> pb::Approval {
    let r = &a.requested;
    let status = a.state.code();
    pb::Approval {
        approval_id: r.approval_id.to_string(),
        session_id: r.session_id.clone(),
        status: status.into(),
        view: Some(view_pb(&r.view)),
        offer: r.offer.as_ref().map(offer),
        reason: r.not_covered_reason.clone().unwrap_or_default(),
        expires_at: rfc3339(r.expires_at),
        browser_profile_id: String::new(),
        snapshot_id: String::new(),
        node_ref: String::new(),
    }
}

pub(super) fn grant(g: &Grant) -> pb::TaskGrant {
    let c = &g.created;
    pb::TaskGrant {
        grant_id: c.grant_id.to_string(),
        session_id: c.session_id.clone(),
        origin: c.scope.origin.clone(),
        path_prefix: c.scope.path_prefix.clone(),
        created_at: rfc3339(c.created_at),
        expires_at: rfc3339(c.expires_at),
        actions_used: g.actions_used,
        max_actions: c.max_actions,
        chars_used: g.chars_used,
        max_typed_chars: c.max_typed_chars,
        end_reason: g.ended.map(EndReason::code).unwrap_or_default().to_owned(),
    }
}

/// A fresh approval token: 96 random bits, the first six bytes of two v4 UUIDs (bytes before
/// the version nibble are all random).
pub(super) fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use grant_domain::catalogue::Resolution;
    use proto::ApprovalStatus;

    use crate::domain::ApprovalState;

    /// Every status the authorizer writes is one the wire's readers parse.
    #[test]
    fn every_card_status_written_is_one_readers_know() {
        let states = [ApprovalState::Pending, ApprovalState::Expired]
            .into_iter()
            .chain(Resolution::ALL.map(ApprovalState::Resolved));
        for state in states {
            assert!(ApprovalStatus::from_code(state.code()).is_some(), "{state:?} is written as {}", state.code());
        }
        assert_eq!(ApprovalStatus::from_code(proto::AWAIT_STOPPED), Some(ApprovalStatus::Stopped));
    }
}
