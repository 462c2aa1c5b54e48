//! The runtime's sealed facts: an `Authorize` is decided on the element and page a runtime of the
//! tenant read and sealed, never on the worker's copy, and a type on the record value it would
//! type, sealed the same way. Unsealed, forged, expired or another owner's, snapshot's, run's or
//! field's facts are refused, write nothing, and are counted.

use crate::metrics::AuthorizerMetrics;
use std::sync::atomic::{AtomicU64, Ordering};

use proto::ticket::Keyring;
use proto::v1 as pb;
use time::{Duration, OffsetDateTime};
use tonic::{Code, Status};

use super::status::with_reason;

/// How old sealed facts may be: an act follows its observation within seconds; a card asked
/// much later is asked on a page that may have moved (the runtime re-reads it anyway).
pub const FACTS_LIFETIME: Duration = Duration::minutes(10);
/// Clocks of two hosts may disagree by this much.
const SKEW: Duration = Duration::seconds(30);

/// The `ErrorInfo` reasons of a refusal of the facts.
pub const FACTS_NOT_SEALED: &str = "FACTS_NOT_SEALED";
pub const FACTS_INVALID: &str = "FACTS_INVALID";

/// What an `Authorize` names, for its facts to be the runtime's of exactly that.
#[derive(Debug)]
pub(super) struct Named<'a> {
    pub tenant: &'a str,
    pub principal: &'a str,
    pub snapshot_id: &'a str,
    pub node_ref: &'a str,
}

/// Read within [`FACTS_LIFETIME`] before `now`, and not after it but for the clocks' skew.
fn fresh(read: OffsetDateTime, now: OffsetDateTime) -> bool {
    read.checked_add(FACTS_LIFETIME).is_some_and(|end| end >= now) && read.checked_sub(SKEW).is_some_and(|t| t <= now)
}

/// Refusals of facts, counted for the operator.
#[derive(Debug, Default)]
pub(super) struct Refusals(AtomicU64, AuthorizerMetrics);

impl Refusals {
    pub(super) fn new(metrics: AuthorizerMetrics) -> Self {
        Self(AtomicU64::default(), metrics)
    }

    pub(super) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn refuse(&self, reason: &'static str, why: String) -> Status {
        self.0.fetch_add(1, Ordering::Relaxed);
        self.1.facts_refused(reason);
        tracing::warn!(reason, %why, "an Authorize's facts were refused");
        with_reason(Code::PermissionDenied, reason, why)
    }
}

/// The request with its element and page taken from its sealed facts, and the browser profile
/// they were read in; or the request as it is when unsealed facts are accepted (tests only).
pub(super) fn unsealed(
    keys: &Keyring,
    refusals: &Refusals,
    accept_unsealed: bool,
    mut r: pb::AuthorizeRequest,
    named: &Named<'_>,
    now: OffsetDateTime,
) -> Result<(pb::AuthorizeRequest, Option<String>), Status> {
    let Some(sealed) = r.facts.take() else {
        if accept_unsealed {
            return Ok((r, None));
        }
        // A worker of a release before sealed facts: refused, never decided on its own word.
        let why = "an Authorize carries the runtime's sealed facts of the element (its NodeFacts.sealed): \
                   a worker that sends none is of an older release; upgrade it";
        return Err(refusals.refuse(FACTS_NOT_SEALED, why.into()));
    };
    if r.element.is_some() || !r.page_url.is_empty() || !r.page_title.is_empty() {
        return Err(super::status::invalid(
            "facts",
            "the sealed facts carry the element and the page: leave element, page_url and page_title empty",
        ));
    }
    let body = keys.open_facts(named.tenant, &sealed).map_err(|e| refusals.refuse(FACTS_INVALID, e.to_string()))?;
    let mismatch = [
        ("owner", body.principal_id.as_str(), named.principal),
        ("snapshot", &body.snapshot_id, named.snapshot_id),
        ("ref", &body.node_ref, named.node_ref),
    ]
    .into_iter()
    .find(|(_, sealed, asked)| sealed != asked);
    if let Some((what, _, _)) = mismatch {
        return Err(refusals.refuse(FACTS_INVALID, format!("the facts were read for another {what}")));
    }
    let read = OffsetDateTime::from_unix_timestamp_nanos(i128::from(body.read_ms) * 1_000_000)
        .map_err(|_| refusals.refuse(FACTS_INVALID, "the facts' time is not a time".into()))?;
    if !fresh(read, now) {
        return Err(refusals.refuse(FACTS_INVALID, "the facts are too old: observe again".into()));
    }
    // The field table's bounds, which the sealed bytes passed unread: a page may make its own URL
    // as long as it likes.
    if body.page_url.chars().count() > proto::limits::MAX_URL_CHARS
        || body.page_title.chars().count() > classifier::coverage::MAX_LABEL_CHARS
    {
        return Err(super::status::invalid(
            "facts",
            "the page's URL or title is longer than any page this product acts on",
        ));
    }
    r.element = body.element;
    r.page_url = body.page_url;
    r.page_title = body.page_title;
    Ok((r, Some(body.browser_profile_id)))
}

/// What the decision reads for a type: the record value's text as the runtime sealed it, or for
/// a value that reads as a secret (left out of the seal) a stand-in of its length that reads as
/// one too, so that it is charged, redacted and refused coverage as the value would be. The
/// sealed digest, for the ticket (`None` when unsealed text is accepted, or for no type).
#[allow(clippy::too_many_arguments)] // the request, what it names, and where the facts came from
pub(super) fn sealed_text(
    keys: &Keyring,
    refusals: &Refusals,
    accept_unsealed: bool,
    r: &mut pb::AuthorizeRequest,
    named: &Named<'_>,
    profile: Option<&str>,
    now: OffsetDateTime,
) -> Result<Option<String>, Status> {
    let Some(action) = r.action.as_mut() else { return Ok(None) };
    let typed = action.kind == pb::ActionKind::Type as i32;
    let sealed = match (typed, r.text.take()) {
        (false, None) => return Ok(None),
        (false, Some(_)) => return Err(super::status::invalid("text", "is only for a type")),
        (true, None) if accept_unsealed => return Ok(None),
        (true, None) => {
            let why = "a type carries the runtime's sealed text of its record field (its RecordText.sealed): \
                       a worker that sends none is of an older release; upgrade it";
            return Err(refusals.refuse(FACTS_NOT_SEALED, why.into()));
        }
        (true, Some(sealed)) => sealed,
    };
    if !action.text.is_empty() {
        return Err(super::status::invalid("action.text", "the sealed text carries it: leave action.text empty"));
    }
    let body = keys.open_text(named.tenant, &sealed).map_err(|e| refusals.refuse(FACTS_INVALID, e.to_string()))?;
    let run_id = r.run.as_ref().map(|run| run.run_id.as_str()).unwrap_or_default();
    let mut mismatch = vec![
        ("owner", body.principal_id.as_str(), named.principal),
        ("run", &body.run_id, run_id),
        ("record field", &body.field_id, action.field_id.as_str()),
    ];
    if let Some(p) = profile {
        mismatch.push(("browser profile", &body.browser_profile_id, p));
    }
    if let Some((what, _, _)) = mismatch.into_iter().find(|(_, sealed, asked)| sealed != asked) {
        return Err(refusals.refuse(FACTS_INVALID, format!("the text was sealed for another {what}")));
    }
    let read = OffsetDateTime::from_unix_timestamp_nanos(i128::from(body.read_ms) * 1_000_000)
        .map_err(|_| refusals.refuse(FACTS_INVALID, "the text's time is not a time".into()))?;
    if !fresh(read, now) {
        return Err(refusals.refuse(FACTS_INVALID, "the text is too old: observe again".into()));
    }
    let chars = usize::try_from(body.chars).unwrap_or(usize::MAX);
    if chars > proto::limits::MAX_TEXT_ACT_CHARS || body.digest.len() != 32 {
        return Err(refusals.refuse(FACTS_INVALID, "the sealed text is longer than a type may be".into()));
    }
    // A value's text and shape must agree with its digest (a runtime's bug, never the worker's).
    let whole = body.credential_shaped
        || (keys.digest_fits(named.tenant, &body.text, &body.digest) && body.text.chars().count() == chars);
    if !whole {
        return Err(refusals.refuse(FACTS_INVALID, "the sealed text does not match its digest".into()));
    }
    action.text = if body.credential_shaped {
        // A secret's shape, as long as the value: `sk-` and letters (a value that reads as a
        // secret is at least 8 characters).
        format!("sk-{}", "x".repeat(chars.max(8) - 3))
    } else {
        body.text
    };
    Ok(Some(format!("hmac-sha256:{}", hex::encode(&body.digest))))
}

/// The most rows a form's read-back may have: a card of more is no review.
const MAX_FORM_ROWS: usize = 200;

/// A click that could submit a form: the form as the runtime read it back and sealed it, for exactly
/// this owner, browser profile, run, snapshot and ref, as the card shows and binds it.
pub(super) fn sealed_form(
    keys: &Keyring,
    refusals: &Refusals,
    r: &mut pb::AuthorizeRequest,
    named: &Named<'_>,
    profile: Option<&str>,
    now: OffsetDateTime,
) -> Result<Option<grant_domain::catalogue::FormReview>, Status> {
    use grant_domain::catalogue::{FormReview, FormRow, FormStatus};
    let Some(sealed) = r.form.take() else { return Ok(None) };
    // The acts that click: a select's option is clicked too, and its click reaches whatever
    // acts on one around it.
    let clicks = [pb::ActionKind::Click, pb::ActionKind::Check, pb::ActionKind::Select].map(|k| k as i32);
    if r.action.as_ref().is_none_or(|a| !clicks.contains(&a.kind)) {
        return Err(super::status::invalid("form", "is only for a click, a check or a select"));
    }
    let body = keys.open_form(named.tenant, &sealed).map_err(|e| refusals.refuse(FACTS_INVALID, e.to_string()))?;
    let run_id = r.run.as_ref().map(|run| run.run_id.as_str()).unwrap_or_default();
    let mut mismatch = vec![
        ("owner", body.principal_id.as_str(), named.principal),
        ("run", &body.run_id, run_id),
        ("snapshot", &body.snapshot_id, named.snapshot_id),
        ("ref", &body.node_ref, named.node_ref),
    ];
    if let Some(p) = profile {
        mismatch.push(("browser profile", &body.browser_profile_id, p));
    }
    if let Some((what, _, _)) = mismatch.into_iter().find(|(_, sealed, asked)| sealed != asked) {
        return Err(refusals.refuse(FACTS_INVALID, format!("the form was read for another {what}")));
    }
    let read = OffsetDateTime::from_unix_timestamp_nanos(i128::from(body.read_ms) * 1_000_000)
        .map_err(|_| refusals.refuse(FACTS_INVALID, "the form's time is not a time".into()))?;
    if !fresh(read, now) {
        return Err(refusals.refuse(FACTS_INVALID, "the form read-back is too old: read it again".into()));
    }
    let review = body.review.unwrap_or_default();
    let max = classifier::coverage::MAX_LABEL_CHARS;
    let long = |s: &str| s.chars().count() > max;
    let bounded = review.rows.len() <= MAX_FORM_ROWS
        && review.digest.len() == 32
        && review.rows.iter().all(|row| {
            !long(&row.label) && !long(&row.value) && !long(&row.record_value) && !long(&row.record_field_id)
        });
    if !bounded {
        return Err(super::status::invalid("form", "the read-back is larger than any form a card can show"));
    }
    let opt = |s: String| (!s.is_empty()).then_some(s);
    let rows = review
        .rows
        .into_iter()
        .map(|row| {
            let status = match pb::FormStatus::try_from(row.status) {
                Ok(pb::FormStatus::Match) => FormStatus::Match,
                Ok(pb::FormStatus::MatchNormalised) => FormStatus::MatchNormalised,
                Ok(pb::FormStatus::Mismatch) => FormStatus::Mismatch,
                Ok(pb::FormStatus::Untouched) => FormStatus::Untouched,
                Ok(pb::FormStatus::Redacted) => FormStatus::Redacted,
                Ok(pb::FormStatus::Chosen) => FormStatus::Chosen,
                _ => return Err(super::status::invalid("form", "a row has no status")),
            };
            let kind = pb::FieldKind::try_from(row.kind)
                .map_err(|_| super::status::invalid("form", "a row's field kind is unknown"))?;
            Ok(FormRow {
                label: row.label,
                kind: classifier::FieldKind::from(kind).code().to_owned(),
                value: row.value,
                record_field_id: opt(row.record_field_id),
                record_value: opt(row.record_value),
                status,
                normalisation: opt(row.normalisation),
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(Some(FormReview { rows, digest: format!("hmac-sha256:{}", hex::encode(&review.digest)) }))
}
