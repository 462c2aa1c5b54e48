//! The runtime's sealed facts: an `Authorize` is decided on the element and page a runtime of the
//! tenant read and sealed, never on the worker's copy. Unsealed, forged, expired or another
//! owner's or snapshot's facts are refused, write nothing, and are counted.

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

/// Refusals of facts, counted for the operator.
#[derive(Debug, Default)]
pub(super) struct Refusals(AtomicU64);

impl Refusals {
    pub(super) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn refuse(&self, reason: &'static str, why: String) -> Status {
        self.0.fetch_add(1, Ordering::Relaxed);
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
        let why = "an Authorize carries the runtime's sealed facts of the element (its NodeFacts.sealed)";
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
    if read + FACTS_LIFETIME < now || read > now + SKEW {
        return Err(refusals.refuse(FACTS_INVALID, "the facts are too old: observe again".into()));
    }
    r.element = body.element;
    r.page_url = body.page_url;
    r.page_title = body.page_title;
    Ok((r, Some(body.browser_profile_id)))
}
