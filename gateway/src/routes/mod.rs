//! The routes: one table, read both by the router and by the OpenAPI document, so that what is
//! served and what is documented cannot drift. Each handler checks its caller with the scopes
//! its own entry names.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::{Json, Router, middleware};
use credentials::Scope;
use proto::v1 as pb;

use crate::api::{Activity, ActivityRow, Me, Position, Written, rfc3339};
use crate::call::{Answer, Call, ReadQuery, Seg, entity_id, status};
use crate::docs::{Doc, doc, schema};
use crate::gateway::Gateway;
use crate::guard;
use crate::owners::Kind;
use crate::problem::Problem;
use crate::settings::VIEW_WAIT;

mod agents;
mod approvals;
mod chats;
mod events;
mod grants;
mod live;
mod receipt;
mod resolve;
mod sign_in;
mod stop;

use agents::{CONNECT_AGENT, DISCONNECT_AGENT, LIST_AGENTS, connect_agent, disconnect_agent, list_agents};
use approvals::{GET_APPROVAL, LIST_APPROVALS, get_approval, list_approvals};
use chats::{CONTINUE_TASK, LIST_CHATS, START_TASK, continue_task, list_chats, start_task};
use events::{EVENTS, events};
use grants::{GET_GRANT, LIST_GRANTS, REVOKE_GRANT, get_grant, list_grants, revoke_grant};
use live::{LIVE, LIVE_INPUT, live, live_input};
use receipt::{RECEIPT, receipt};
use resolve::{RESOLVE, resolve};
use sign_in::{sign_in, sign_in_page};
use stop::{STOP_EVERYTHING, STOP_SESSION, stop_everything, stop_session};

pub(crate) const ME: Doc = doc("get", "/v1/me", "Who is signed in, and a browser session's CSRF token", schema::<Me>);
pub(crate) const SIGN_OUT: Doc =
    Doc { write: true, ..doc("post", "/v1/sign-out", "Ends this browser session", schema::<Written>) };
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
pub(crate) const OPENAPI: Doc =
    doc("get", "/v1/openapi.json", "This document", |_| schemars::json_schema!({ "type": "object" }));

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
        on(RECEIPT, receipt),
        on(LIVE, live),
        on(LIVE_INPUT, live_input),
        on(RESOLVE, resolve),
        on(LIST_GRANTS, list_grants),
        on(GET_GRANT, get_grant),
        on(REVOKE_GRANT, revoke_grant),
        on(STOP_SESSION, stop_session),
        on(STOP_EVERYTHING, stop_everything),
        on(CONNECT_AGENT, connect_agent),
        on(LIST_AGENTS, list_agents),
        on(DISCONNECT_AGENT, disconnect_agent),
        on(LIST_CHATS, list_chats),
        on(START_TASK, start_task),
        on(CONTINUE_TASK, continue_task),
        on(ACTIVITY, activity),
        on(EVENTS, events),
        on(OPENAPI, openapi),
    ]
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
                approval_id: r.approval_id.map(|a| a.to_string()),
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
    let body = DOCUMENT.get_or_init(|| crate::openapi::document(routes().into_iter().map(|(d, _)| d)).to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response()
}
