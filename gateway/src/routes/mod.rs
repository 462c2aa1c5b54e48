//! The routes: one table, read both by the router and by the OpenAPI document, so that what is
//! served and what is documented cannot drift. Each handler checks its caller with the scopes
//! its own entry names.

use axum::Json;
use axum::extract::{FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::{Router, middleware};
use credentials::Scope;
use proto::v1 as pb;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::api::{
    Activity, ActivityRow, Approval, Approvals, Grant, Grants, Me, Position, Resolution, Resolve, Resolved, Written,
    rfc3339,
};
use crate::guard::{self, Proof, RequestId};
use crate::problem::Problem;
use crate::{Gateway, Kind, Owner, SESSION_COOKIE, VIEW_WAIT};

mod grants;
mod live;
mod resolve;
mod sign_in;
mod stop;

pub(crate) use grants::grants_of;
use grants::{get_grant, list_grants, revoke_grant};
use live::{LiveInput, card_tab, live, live_input, runtime_problem};
use resolve::resolve;
pub(crate) use sign_in::escape;
use sign_in::{sign_in, sign_in_page};
use stop::{Stopped, stop_everything, stop_session};

type Answer<T> = Result<Json<T>, Problem>;
type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One route as documented: what the OpenAPI document says and what the handler checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Doc {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// Every one of these is needed.
    pub scopes: &'static [Scope],
    /// Mounted only for a tenant whose task-grant flag is on: otherwise 404, as any unknown path.
    pub flagged: bool,
    /// A write: a browser session must send its CSRF token.
    pub write: bool,
    pub query: Option<SchemaOf>,
    pub body: Option<SchemaOf>,
    pub reply: SchemaOf,
    /// The reply is a `text/event-stream`.
    pub events: bool,
    /// The reply is an `image/png`.
    pub image: bool,
}

const fn doc(method: &'static str, path: &'static str, summary: &'static str, reply: SchemaOf) -> Doc {
    Doc {
        method,
        path,
        summary,
        scopes: &[],
        flagged: false,
        write: false,
        query: None,
        body: None,
        reply,
        events: false,
        image: false,
    }
}

pub(crate) const ME: Doc = doc("get", "/v1/me", "Who is signed in, and a browser session's CSRF token", schema::<Me>);
pub(crate) const SIGN_OUT: Doc =
    Doc { write: true, ..doc("post", "/v1/sign-out", "Ends this browser session", schema::<Written>) };
pub(crate) const LIST_APPROVALS: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    query: Some(schema::<ApprovalsQuery>),
    ..doc("get", "/v1/sessions/{session_id}/approvals", "A session's approvals, pending first", schema::<Approvals>)
};
pub(crate) const GET_APPROVAL: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    query: Some(schema::<ReadQuery>),
    ..doc("get", "/v1/approvals/{approval_id}", "One approval card", schema::<Approval>)
};
pub(crate) const LIVE: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    image: true,
    query: Some(schema::<LiveQuery>),
    ..doc(
        "get",
        "/v1/approvals/{approval_id}/live",
        "A PNG of the live browser tab a pending card's session acts in, as it is now; while the page shows a \
         dialog, JSON {\"dialog\": its text}",
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
pub(crate) const RESOLVE: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    body: Some(schema::<Resolve>),
    ..doc(
        "post",
        "/v1/approvals/{approval_id}/resolve",
        "Answers a card: approve_once, approve_for_task (also needs browser.grant.write, and repeats the offer), \
         deny, or take_over (denied to the agent, whose run ends, and the owner acts in the live tab); a stale or \
         mismatched offer is 409 and the card stays pending",
        schema::<Resolved>,
    )
};
pub(crate) const LIST_GRANTS: Doc = Doc {
    scopes: &[Scope::GrantRead],
    flagged: true,
    query: Some(schema::<GrantsQuery>),
    ..doc(
        "get",
        "/v1/browser-task-grants",
        "The owner's task permissions (or one session's), newest first",
        schema::<Grants>,
    )
};
pub(crate) const GET_GRANT: Doc = Doc {
    scopes: &[Scope::GrantRead],
    flagged: true,
    query: Some(schema::<ReadQuery>),
    ..doc("get", "/v1/browser-task-grants/{grant_id}", "One task permission", schema::<Grant>)
};
pub(crate) const REVOKE_GRANT: Doc = Doc {
    scopes: &[Scope::GrantWrite],
    flagged: true,
    write: true,
    ..doc(
        "post",
        "/v1/browser-task-grants/{grant_id}/revoke",
        "Stops a task permission; it holds from the next action",
        schema::<Written>,
    )
};
pub(crate) const STOP_SESSION: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    ..doc(
        "post",
        "/v1/sessions/{session_id}/stop",
        "Stops the agent in a chat session: its task permission ends, its waiting cards are denied, the run \
         acting ends at its next action, and nothing runs until the owner's next message",
        schema::<Written>,
    )
};
pub(crate) const STOP_EVERYTHING: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    ..doc(
        "post",
        "/v1/stop-everything",
        "Stops the agent in every chat of the owner's that is not stopped already, as the stop of one chat does",
        schema::<Stopped>,
    )
};
pub(crate) const ACTIVITY: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    query: Some(schema::<ReadQuery>),
    ..doc(
        "get",
        "/v1/sessions/{session_id}/activity",
        "What ran in a session and under which authorization, newest first",
        schema::<Activity>,
    )
};
pub(crate) const EVENTS: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    events: true,
    ..doc(
        "get",
        "/v1/sessions/{session_id}/events",
        "Server-sent events: approval.pending, approval.resolved, grant.changed, grant.ended, activity.changed",
        schema::<crate::stream::StreamEvent>,
    )
};
pub(crate) const OPENAPI: Doc =
    doc("get", "/v1/openapi.json", "This document", |_| schemars::json_schema!({ "type": "object" }));

/// Every documented route, in the document's order.
/// Every route: its document entry and its handler, mounted on the entry's own method and path,
/// so the router and the OpenAPI document are one list.
pub(crate) fn routes() -> Vec<(Doc, MethodRouter<Gateway>)> {
    fn on<H, T>(d: Doc, handler: H) -> (Doc, MethodRouter<Gateway>)
    where
        H: axum::handler::Handler<T, Gateway>,
        T: 'static,
    {
        let filter = match d.method {
            "post" => axum::routing::MethodFilter::POST,
            _ => axum::routing::MethodFilter::GET,
        };
        (d, axum::routing::on(filter, handler))
    }
    vec![
        on(ME, me),
        on(SIGN_OUT, sign_out),
        on(LIST_APPROVALS, list_approvals),
        on(GET_APPROVAL, get_approval),
        on(LIVE, live),
        on(LIVE_INPUT, live_input),
        on(RESOLVE, resolve),
        on(LIST_GRANTS, list_grants),
        on(GET_GRANT, get_grant),
        on(REVOKE_GRANT, revoke_grant),
        on(STOP_SESSION, stop_session),
        on(STOP_EVERYTHING, stop_everything),
        on(ACTIVITY, activity),
        on(EVENTS, crate::stream::events),
        on(OPENAPI, openapi),
    ]
}

/// The console's pages, beside the API's routes.
const PAGES: [&str; 6] = ["/sign-in", "/", "/go", "/sessions/{session_id}", "/console.js", "/console.css"];

/// Every route template served: the closed set a request's metric is labelled by.
pub(crate) fn templates() -> impl Iterator<Item = &'static str> {
    static API: std::sync::LazyLock<Vec<&'static str>> =
        std::sync::LazyLock::new(|| routes().into_iter().map(|(d, _)| d.path).collect());
    API.iter().copied().chain(PAGES)
}

pub(crate) fn router(gateway: Gateway) -> Router {
    let mut api = Router::new();
    for (d, handler) in routes() {
        api = api.route(d.path, handler);
    }
    let app = api
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/", get(crate::console::home))
        .route("/go", get(crate::console::go))
        .route("/sessions/{session_id}", get(crate::console::session))
        .route("/console.js", get(crate::console::script))
        .route("/console.css", get(crate::console::style))
        .fallback(|| async { Problem::not_found() })
        .method_not_allowed_fallback(|| async {
            Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this path takes another method")
        })
        .with_state(gateway.clone())
        .layer(middleware::from_fn(guard::edge));
    if gateway.0.tls { app.layer(middleware::from_fn(guard::hsts)) } else { app }
}

/// What every handler starts from: the gateway, the request's id, headers and query, and the
/// connection to mark once the caller authenticates.
pub(crate) struct Call {
    pub(crate) gateway: Gateway,
    pub(crate) id: String,
    pub(crate) headers: HeaderMap,
    pub(crate) query: Option<String>,
    proof: Option<Proof>,
}

impl FromRequestParts<Gateway> for Call {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, gateway: &Gateway) -> Result<Self, Problem> {
        Ok(Self {
            gateway: gateway.clone(),
            id: parts.extensions.get::<RequestId>().map(|r| r.0.clone()).unwrap_or_default(),
            headers: parts.headers.clone(),
            query: parts.uri.query().map(str::to_owned),
            proof: parts.extensions.get::<Proof>().cloned(),
        })
    }
}

/// A route's one path parameter; one that is not text is a 422 problem like any bad field.
pub(crate) struct Seg(pub(crate) String);

impl FromRequestParts<Gateway> for Seg {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, gateway: &Gateway) -> Result<Self, Problem> {
        Path::<String>::from_request_parts(parts, gateway)
            .await
            .map(|Path(s)| Self(s))
            .map_err(|_| Problem::invalid("path", "a path segment is not valid UTF-8 text"))
    }
}

impl Call {
    /// The owner, checked as route `d` says: credential, CSRF for a write, rate, scopes.
    pub(crate) async fn owner(&self, d: &Doc) -> Result<(Owner, String), Problem> {
        let (owner, secret) = self.gateway.owner(&self.headers, d.write, d.scopes).await?;
        if let Some(p) = &self.proof {
            p.registry.prove(p.id);
        }
        Ok((owner, secret))
    }

    /// The owner of a task-grant route: authenticated (with CSRF and rate) but not yet held to
    /// the route's scopes, which [`Call::scoped`] checks once the route is known to be mounted.
    pub(crate) async fn flagged(&self, d: &Doc) -> Result<Owner, Problem> {
        let (owner, _) = self.gateway.owner(&self.headers, d.write, &[]).await?;
        if let Some(p) = &self.proof {
            p.registry.prove(p.id);
        }
        Ok(owner)
    }

    pub(crate) fn scoped(&self, owner: &Owner, d: &Doc) -> Result<(), Problem> {
        match d.scopes.iter().find(|s| !owner.has(**s)) {
            Some(missing) => {
                Err(Problem::forbidden("scope_missing", format!("this call needs the scope {}", missing.code())))
            }
            None => Ok(()),
        }
    }

    pub(crate) fn grpc<T>(&self, owner: &Owner, message: T) -> Result<tonic::Request<T>, Problem> {
        self.gateway.grpc(owner, &self.id, message)
    }

    pub(crate) fn query<T: serde::de::DeserializeOwned + Default>(&self) -> Result<T, Problem> {
        guard::query(self.query.as_deref())
    }
}

fn status(s: tonic::Status) -> Problem {
    Problem::from_status(&s)
}

pub(crate) fn entity_id(field: &'static str, value: &str) -> Result<(), Problem> {
    ledger::check_entity_id(field, value).map_err(|e| Problem::invalid(field, e.reason))
}

fn uuid(field: &str, value: &str) -> Result<Uuid, Problem> {
    // The canonical hyphenated form only: one spelling per object.
    Uuid::parse_str(value)
        .ok()
        .filter(|u| u.hyphenated().to_string() == value)
        .ok_or_else(|| Problem::invalid(field, "is a UUID in its hyphenated lowercase form"))
}

fn min_position(text: Option<&str>) -> Result<Option<pb::Position>, Problem> {
    text.map(|t| Position::parse(t).map(Position::to_pb)).transpose()
}

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsQuery {
    /// Only the pending ones.
    #[serde(default)]
    pub pending_only: Option<bool>,
    /// `<tx_id>.<position>` from a write's answer.
    #[serde(default)]
    pub min_position: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantsQuery {
    /// The chat session whose permissions to list; absent, every one of the owner's.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Only the active ones.
    #[serde(default)]
    pub active_only: Option<bool>,
    #[serde(default)]
    pub min_position: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveQuery {
    /// Any number: a new one makes a browser load the tab anew rather than show the last picture.
    #[serde(default)]
    #[allow(dead_code)] // only its shape is checked: the value just changes the URL
    pub at: Option<u64>,
}

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadQuery {
    /// `<tx_id>.<position>` from a write's answer.
    #[serde(default)]
    pub min_position: Option<String>,
}

async fn me(call: Call) -> Answer<Me> {
    let (owner, secret) = call.owner(&ME).await?;
    Ok(Json(Me {
        tenant: owner.tenant.clone(),
        principal: owner.principal.clone(),
        scopes: owner.scopes.iter().map(|s| s.code().to_owned()).collect(),
        signed_in_by: if owner.kind == Kind::Session { "session" } else { "token" }.into(),
        csrf_token: (owner.kind == Kind::Session).then(|| crate::owners::csrf_token(&secret)),
    }))
}

async fn sign_out(call: Call) -> Result<Response, Problem> {
    let (owner, secret) = call.owner(&SIGN_OUT).await?;
    if owner.kind != Kind::Session {
        return Err(Problem::new(StatusCode::CONFLICT, "not_a_session", "an API token is revoked with grantctl"));
    }
    call.gateway.owners().sign_out(&secret).await.map_err(|e| Problem::unavailable(e.to_string()))?;
    let mut response = Json(Written { position: None }).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("__Host-gl_session=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    Ok(response)
}

/// A session's approvals, pending first; `session` must be the owner's (else 404).
pub(crate) async fn approvals_of(
    call: &Call,
    owner: &Owner,
    session_id: &str,
    pending_only: bool,
    min: Option<pb::Position>,
) -> Result<Vec<Approval>, Problem> {
    let req = pb::ListApprovalsRequest { session_id: session_id.into(), pending_only, min_position: min };
    let reply = call.gateway.authorizer().list_approvals(call.grpc(owner, req)?).await.map_err(status)?;
    let mut approvals: Vec<Approval> = reply.into_inner().approvals.into_iter().map(Approval::from).collect();
    approvals.sort_by_key(|a| a.status != "PENDING");
    Ok(approvals)
}

async fn list_approvals(call: Call, Seg(session_id): Seg) -> Answer<Approvals> {
    let (owner, _) = call.owner(&LIST_APPROVALS).await?;
    let q: ApprovalsQuery = call.query()?;
    entity_id("session_id", &session_id)?;
    let min = min_position(q.min_position.as_deref())?;
    let approvals = approvals_of(&call, &owner, &session_id, q.pending_only.unwrap_or(false), min).await?;
    Ok(Json(Approvals { approvals }))
}

async fn get_approval(call: Call, Seg(approval_id): Seg) -> Answer<Approval> {
    let (owner, _) = call.owner(&GET_APPROVAL).await?;
    let q: ReadQuery = call.query()?;
    uuid("approval_id", &approval_id)?;
    let req = pb::GetApprovalRequest { approval_id, min_position: min_position(q.min_position.as_deref())? };
    let reply = call.gateway.authorizer().get_approval(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(reply.into_inner().into()))
}

/// A route that takes no query.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoQuery {}

async fn activity(call: Call, Seg(session_id): Seg) -> Answer<Activity> {
    let (owner, _) = call.owner(&ACTIVITY).await?;
    let q: ReadQuery = call.query()?;
    entity_id("session_id", &session_id)?;
    let min = q.min_position.as_deref().map(Position::parse).transpose()?;
    // The session must be this owner's: the authorizer says so, or 404.
    let own = pb::ListApprovalsRequest { session_id: session_id.clone(), pending_only: true, min_position: None };
    call.gateway.authorizer().list_approvals(call.grpc(&owner, own)?).await.map_err(status)?;
    let caught_up = match min {
        None => true,
        Some(p) => view_reached(&call.gateway, p).await?,
    };
    let client = call.gateway.0.views.get().await.map_err(|e| Problem::unavailable(e.to_string()))?;
    let rows = projections::audit::session_activity(&**client, &owner.tenant, &session_id, 200)
        .await
        .map_err(|e| Problem::unavailable(e.to_string()))?;
    Ok(Json(Activity {
        rows: rows
            .into_iter()
            .map(|r| ActivityRow {
                position: r.global_position,
                recorded_at: rfc3339(r.recorded_at),
                event_type: r.event_type,
                principal: r.principal,
                authorization: r.authorization,
                summary: r.summary,
            })
            .collect(),
        caught_up,
    }))
}

/// Waits, at most [`VIEW_WAIT`], for the audit view to pass `at`. A connection is held only
/// for each look; past [`crate::MAX_VIEW_WAITS`] waiting reads, a read looks once.
async fn view_reached(gateway: &Gateway, at: Position) -> Result<bool, Problem> {
    let deadline = tokio::time::Instant::now() + VIEW_WAIT;
    let at = ledger::Checkpoint { tx_id: at.tx_id, position: at.position };
    let waiting = gateway.0.view_waits.clone().try_acquire_owned().ok();
    loop {
        let client = gateway.0.views.get().await.map_err(|e| Problem::unavailable(e.to_string()))?;
        let reached =
            projections::audit::audit_reached(&**client, at).await.map_err(|e| Problem::unavailable(e.to_string()))?;
        drop(client);
        if reached || waiting.is_none() || tokio::time::Instant::now() >= deadline {
            return Ok(reached);
        }
        // The projection worker commits in batches; a short pause between looks is enough.
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

async fn openapi() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let body = DOCUMENT.get_or_init(|| crate::openapi::document().to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response()
}
