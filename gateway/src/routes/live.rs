//! The live tab behind a pending card: its picture, and the owner's input once they take it over.

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use credentials::Scope;
use proto::ApprovalStatus;
use proto::v1 as pb;
use schemars::JsonSchema;

use crate::call::{Call, NoQuery, Seg, status, uuid};
use crate::docs::{Doc, doc, schema};
use crate::guard;
use crate::owners::Owner;
use crate::problem::Problem;

pub(crate) const LIVE: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    image: true,
    query: Some(schema::<LiveQuery>),
    ..doc(
        "get",
        "/v1/approvals/{approval_id}/live",
        "A PNG of the live browser tab a pending card's session acts in, as it is now: the card's element \
         outlined and the rest dimmed (x-live-element: outlined, not-in-view, gone or none), and every field \
         a card redacts painted over (x-live-masked: yes, and how many in x-live-masked-fields; no once the \
         owner took the tab over); while the \
         page shows a dialog, JSON {\"dialog\": its text}",
        |_| schemars::json_schema!({ "type": "string", "contentMediaType": "image/png" }),
    )
};
pub(crate) const LIVE_INPUT: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    image: true,
    body: Some(schema::<LiveInput>),
    ..doc(
        "post",
        "/v1/approvals/{approval_id}/live/input",
        "The owner's click (with the page its picture showed), text, key, answer to the page's dialog, or done in \
         the tab of a card they took over; a PNG of the tab after it, or its dialog as JSON (204 once done); while \
         a dialog is open only an answer naming it is taken",
        |_| schemars::json_schema!({ "type": "string", "contentMediaType": "image/png" }),
    )
};

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveQuery {
    /// Any number: a new one makes a browser load the tab anew rather than show the last picture.
    #[serde(default)]
    #[allow(dead_code)] // only its shape is checked: the value just changes the URL
    pub at: Option<u64>,
}

/// The live tab behind a pending card: only the card's owner sees it, only while it is pending,
/// and only from a gateway configured with the runtime (otherwise the route is not here).
pub(super) async fn live(call: Call, Seg(approval_id): Seg) -> Result<Response, Problem> {
    let (owner, _) = call.owner(&LIVE).await?;
    call.query::<LiveQuery>()?;
    uuid("approval_id", &approval_id)?;
    let (mut runtime, tab) =
        card_tab(&call, &owner, approval_id, &[ApprovalStatus::Pending, ApprovalStatus::TakenOver]).await?;
    let req = proto::runtime::LiveViewRequest {
        browser_profile_id: tab.profile,
        snapshot_id: tab.snapshot,
        node_ref: tab.node_ref,
    };
    let view = runtime.live_view(call.grpc(&owner, req)?).await.map_err(runtime_problem)?.into_inner();
    Ok(shown(view))
}

/// The owner's click, text, key or "done" in the tab of a card they took over; the tab as it is
/// after it (or nothing, once done).
pub(super) async fn live_input(call: Call, Seg(approval_id): Seg, req: Request) -> Result<Response, Problem> {
    use proto::runtime::live_input_request::Input;
    let (owner, _) = call.owner(&LIVE_INPUT).await?;
    call.query::<NoQuery>()?;
    uuid("approval_id", &approval_id)?;
    let body: LiveInput = guard::json_body(req).await?;
    let expected_page = body.page.unwrap_or_default();
    // A click names the page its picture showed, so it never lands on one the owner has not seen.
    match (body.click.is_some(), expected_page.is_empty()) {
        (true, true) => return Err(Problem::invalid("page", "a click names the page its picture showed")),
        (false, false) => return Err(Problem::invalid("page", "goes with a click only")),
        _ => {}
    }
    if expected_page.chars().count() > proto::limits::MAX_URL_CHARS {
        return Err(Problem::invalid("page", "is too long to be a page the picture showed"));
    }
    let short = |t: &str| !t.is_empty() && t.chars().count() <= 1024;
    let input = match (body.click, body.text, body.key, body.done, body.answer) {
        (Some(p), None, None, None, None) => Input::Click(proto::runtime::Point { x: p.x, y: p.y }),
        (None, Some(t), None, None, None) if short(&t) => Input::Text(t),
        (None, Some(_), None, None, None) => return Err(Problem::invalid("text", "is 1 to 1024 characters")),
        (None, None, Some(k), None, None) => Input::Key(k),
        (None, None, None, Some(true), None) => Input::Done(true),
        (None, None, None, None, Some(a)) => {
            if a.text.as_deref().is_some_and(|t| !short(t)) {
                return Err(Problem::invalid("answer.text", "is 1 to 1024 characters"));
            }
            if a.seen.chars().count() > proto::limits::MAX_DIALOG_CHARS {
                return Err(Problem::invalid("answer.seen", "is the dialog's text as shown, at most 1024 characters"));
            }
            Input::Answer(proto::runtime::DialogAnswer {
                accept: a.accept,
                text: a.text.unwrap_or_default(),
                seen: a.seen,
            })
        }
        _ => return Err(Problem::invalid("input", "is exactly one of click, text, key, answer or done: true")),
    };
    let (mut runtime, tab) = card_tab(&call, &owner, approval_id, &[ApprovalStatus::TakenOver]).await?;
    let req = proto::runtime::LiveInputRequest {
        browser_profile_id: tab.profile,
        snapshot_id: tab.snapshot,
        input: Some(input),
        expected_page,
    };
    let view = runtime.live_input(call.grpc(&owner, req)?).await.map_err(runtime_problem)?.into_inner();
    Ok(if view.png.is_empty() && !view.dialog_open { StatusCode::NO_CONTENT.into_response() } else { shown(view) })
}

/// The tab's picture, or, while the page shows a dialog, its text as JSON.
fn shown(view: proto::runtime::LiveViewReply) -> Response {
    if !view.dialog_open {
        let element = match proto::runtime::PictureElement::try_from(view.element) {
            Ok(proto::runtime::PictureElement::Outlined) => "outlined",
            Ok(proto::runtime::PictureElement::NotInView) => "not-in-view",
            Ok(proto::runtime::PictureElement::Gone) => "gone",
            _ => "none",
        };
        let mut shown = png(view.png, &view.page);
        let headers = shown.headers_mut();
        headers.insert(header::HeaderName::from_static("x-live-element"), HeaderValue::from_static(element));
        let masked = if view.masked { "yes" } else { "no" };
        headers.insert(header::HeaderName::from_static("x-live-masked"), HeaderValue::from_static(masked));
        headers.insert(header::HeaderName::from_static("x-live-masked-fields"), HeaderValue::from(view.masked_fields));
        return shown;
    }
    let headers = [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))];
    (headers, Json(LiveDialog { dialog: view.dialog })).into_response()
}

/// A dialog the page shows instead of a picture: only an answer naming it reaches the page.
#[derive(Debug, Clone, serde::Serialize, JsonSchema)]
pub(crate) struct LiveDialog {
    /// From the website: at most 1,024 characters, control and direction characters removed.
    pub dialog: String,
}

/// The owner's OK or Cancel on the page's dialog.
#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveAnswer {
    /// OK (true) or Cancel (false).
    pub accept: bool,
    /// A prompt's answer, 1 to 1024 characters; only a prompt takes one.
    #[serde(default)]
    pub text: Option<String>,
    /// The dialog's text as it was shown (`dialog`): another dialog is not answered (409).
    pub seen: String,
}

type RuntimeClient = proto::runtime::browser_runtime_client::BrowserRuntimeClient<tonic::transport::Channel>;

/// The runtime and the browser profile of the owner's card `approval_id`, while the card's
/// status is one of `statuses`: 404 when it is not the owner's or the gateway has no runtime.
pub(super) async fn card_tab(
    call: &Call,
    owner: &Owner,
    approval_id: String,
    statuses: &[ApprovalStatus],
) -> Result<(RuntimeClient, Tab), Problem> {
    let Some(runtime) = call.gateway.runtime() else { return Err(Problem::not_found()) };
    let req = pb::GetApprovalRequest { approval_id, min_position: None };
    let card = call.gateway.authorizer().get_approval(call.grpc(owner, req)?).await.map_err(status)?.into_inner();
    if !ApprovalStatus::from_code(&card.status).is_some_and(|s| statuses.contains(&s)) {
        return Err(Problem::new(StatusCode::CONFLICT, "not_pending", "the card is answered: its tab is not shown"));
    }
    if card.browser_profile_id.is_empty() || card.snapshot_id.is_empty() {
        return Err(Problem::new(StatusCode::CONFLICT, "no_live_tab", "this card names no browser tab"));
    }
    Ok((runtime, Tab { profile: card.browser_profile_id, snapshot: card.snapshot_id, node_ref: card.node_ref }))
}

/// The tab a card was asked in: its session's browser profile, the card's snapshot and the act's
/// element in it.
pub(super) struct Tab {
    pub(super) profile: String,
    pub(super) snapshot: String,
    pub(super) node_ref: String,
}

pub(super) fn runtime_problem(s: tonic::Status) -> Problem {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => {
            Problem::unavailable("the browser runtime cannot be reached now")
        }
        _ => Problem::from_status(&s),
    }
}

/// The tab's picture, with the page's origin and path (`x-live-page`) for the console to show.
pub(super) fn png(bytes: Vec<u8>, page: &str) -> Response {
    let page = HeaderValue::from_str(page).unwrap_or_else(|_| HeaderValue::from_static(""));
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("image/png")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (header::HeaderName::from_static("x-live-page"), page),
    ];
    (headers, bytes).into_response()
}

/// One input to a tab taken over: exactly one field.
#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveInput {
    /// A click at this point of the live picture, in its pixels.
    #[serde(default)]
    pub click: Option<LivePoint>,
    /// Text typed as it is, 1 to 1024 characters.
    #[serde(default)]
    pub text: Option<String>,
    /// A named key: Enter, Tab, Escape, Backspace, Delete, the arrows, Home, End, PageUp, PageDown.
    #[serde(default)]
    pub key: Option<String>,
    /// The owner is done: the tab closes.
    #[serde(default)]
    pub done: Option<bool>,
    /// With a click, required: the page (origin and path, as `x-live-page` named it) of the
    /// picture it was aimed at; the click is refused (409) when the tab shows another page now.
    #[serde(default)]
    pub page: Option<String>,
    /// OK or Cancel on the dialog the page shows; while one is open nothing else is taken (409).
    #[serde(default)]
    pub answer: Option<LiveAnswer>,
}

#[derive(Debug, Clone, Copy, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LivePoint {
    pub x: u32,
    pub y: u32,
}
