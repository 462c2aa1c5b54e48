//! `ReadForm`: the form a click could submit, read back from the live page beside the task
//! record and sealed for the card.

use proto::runtime as pb;
use proto::v1 as gl;
use time::OffsetDateTime;
use tonic::{Request, Response, Status};

use crate::session::{FormReadBack, Redeem};

use super::convert::{id, session_status};

use super::shared::{BrowserRuntime, MAX_FORM_ROWS, Timer, record_status};

impl<R: Redeem + 'static> BrowserRuntime<R> {
    pub(super) async fn read_form_call(
        &self,
        req: Request<pb::ReadFormRequest>,
    ) -> Result<Response<pb::ReadFormReply>, Status> {
        let caller = self.caller(&req).await?;
        let req = req.into_inner();
        super::shared::own_run(&caller, &req.run_id)?;
        let run = if req.run_id.is_empty() { None } else { Some(id("run_id", &req.run_id)?) };
        let mut s = self.owned(&caller, &req.session_id).await?;
        let (tenant, principal, profile) = (s.tenant.clone(), s.principal.clone(), s.profile.clone());
        let timer = Timer::start("read_form");
        let (url, read) = bounded!(self, s, s.read_form(&req.snapshot_id, &req.r#ref, &self.config.browser))
            .map_err(session_status)?;
        drop(timer);
        let fields = match read {
            FormReadBack::Form(fields) => fields,
            FormReadBack::Forms(forms) => {
                return Ok(Response::new(pb::ReadFormReply { url, forms, ..Default::default() }));
            }
        };
        // With a run, the diff against its record, sealed for the authorizer's card.
        let (sealed, review) = match run {
            None => (None, None),
            Some(run) => {
                let record = self.records.fields(&tenant, &principal, &run).map_err(record_status)?;
                let locale = self.records.locale(&tenant, &principal, &run).map_err(record_status)?;
                // A field typed for another run is compared with nothing: it is this run's mismatch.
                let value_of = |r: &crate::session::ReadBack| {
                    let id = r.typed_field_id.as_deref().filter(|_| r.typed_run.as_deref() == Some(run.as_str()))?;
                    record.iter().find(|(f, _)| f == id).map(|(_, v)| v.as_str())
                };
                let unreviewable = |why: &str| pb::ReadFormReply {
                    url: url.clone(),
                    forms: 1,
                    unreviewable: why.into(),
                    ..Default::default()
                };
                if fields.iter().any(|r| r.field.opaque) {
                    return Ok(Response::new(unreviewable(crate::review::UNREADABLE_CONTROL)));
                }
                if fields.len() > MAX_FORM_ROWS {
                    return Ok(Response::new(unreviewable(
                        "the form has more fields than an owner can review on a card",
                    )));
                }
                let review = gl::FormReview {
                    rows: fields
                        .iter()
                        .map(|r| {
                            let chosen = r.chosen_run.as_deref() == Some(run.as_str());
                            crate::review::row(r, value_of(r), chosen, locale.as_deref())
                        })
                        .collect(),
                    digest: crate::review::digest(&self.config.tickets, &tenant, &fields),
                };
                let body = gl::FormBody {
                    tenant_id: tenant.clone(),
                    principal_id: principal.clone(),
                    browser_profile_id: profile.clone(),
                    run_id: run.clone(),
                    snapshot_id: req.snapshot_id.clone(),
                    node_ref: req.r#ref.clone(),
                    page_url: url.clone(),
                    review: Some(review.clone()),
                    read_ms: i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000)
                        .unwrap_or(i64::MAX),
                };
                if prost::Message::encoded_len(&body) > proto::limits::MAX_FORM_BODY_BYTES {
                    return Ok(Response::new(unreviewable("the form is too large for an owner to review on a card")));
                }
                (Some(self.config.tickets.seal_form(&body)), Some(review))
            }
        };
        Ok(Response::new(pb::ReadFormReply {
            url,
            fields: fields
                .into_iter()
                .map(|r| pb::FormField {
                    label: r.field.label,
                    name: r.field.name,
                    kind: gl::FieldKind::from(r.field.kind) as i32,
                    value: if crate::review::sensitive(r.field.kind) && !r.field.value.is_empty() {
                        "[REDACTED]".into()
                    } else {
                        r.field.value
                    },
                    checked: r.field.checked,
                    typed_field_id: r.typed_field_id.unwrap_or_default(),
                })
                .collect(),
            sealed,
            review,
            forms: 1,
            unreviewable: String::new(),
        }))
    }
}
