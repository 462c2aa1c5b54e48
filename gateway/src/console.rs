//! The owner's console: one server-rendered page per chat session and a small script of our own
//! (`console/console.js`) that fills it from the gateway's own API and event stream. Nothing is
//! fetched from another host, and every string from a website is set as text, never as markup.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::routes::{Call, Seg, escape};

const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// The console's own policy: scripts, styles and requests to this origin alone, no inline code.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob:; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `/`: who is signed in, and a chat session to open.
pub(crate) async fn home(call: Call) -> Response {
    let body = match call.gateway.owner(&call.headers, false, &[]).await {
        Ok((owner, _)) => format!(
            "<p>Signed in as <strong>{}</strong> of {}.</p>\
             <form method=\"get\" action=\"/go\"><label for=\"session\">Chat session</label> \
             <input id=\"session\" name=\"session\" required maxlength=\"120\" autocomplete=\"off\"> \
             <button type=\"submit\">Open</button></form>",
            escape(&owner.principal),
            escape(&owner.tenant)
        ),
        Err(_) => "<p>Not signed in. Open the sign-in link <code>grantctl owners link</code> printed.</p>".into(),
    };
    shell(StatusCode::OK, "grant-ledger", None, &body)
}

/// `/go?session=S`: the form on `/` lands on the session's page.
pub(crate) async fn go(call: Call) -> Response {
    #[derive(Default, serde::Deserialize)]
    struct Q {
        #[serde(default)]
        session: String,
    }
    let q: Q = crate::guard::query(call.query.as_deref()).unwrap_or_default();
    match session_path(&q.session) {
        Some(path) => (StatusCode::SEE_OTHER, [(header::LOCATION, path)]).into_response(),
        None => shell(StatusCode::BAD_REQUEST, "Not a chat session", None, "<p>That is not a chat session's id.</p>"),
    }
}

/// The console path of chat `session`, if the id is one.
pub(crate) fn session_path(session: &str) -> Option<String> {
    ledger::check_entity_id("session_id", session).ok().map(|()| format!("/sessions/{session}"))
}

/// `/sessions/{id}`: the session's cards, its permission's banner and its activity. The page is
/// the same for anyone; the script reads only what the signed-in owner may read.
pub(crate) async fn session(Seg(session): Seg) -> Response {
    if session_path(&session).is_none() {
        return shell(StatusCode::NOT_FOUND, "Not a chat session", None, "<p>That is not a chat session's id.</p>");
    }
    let body = "<div id=\"banner\" role=\"region\" aria-label=\"Task permission\" aria-live=\"polite\"></div>\
        <p id=\"status\" role=\"status\"></p>\
        <section aria-labelledby=\"cards-title\"><h2 id=\"cards-title\">Waiting for you</h2>\
        <div id=\"cards\"><p class=\"empty\">Nothing is waiting for you.</p></div></section>\
        <section id=\"takeover\" aria-labelledby=\"takeover-title\" hidden><h2 id=\"takeover-title\">You have the tab</h2>\
        <p>The agent's run has ended. What you click on the picture, type or press goes to the live tab\
        <span id=\"takeover-page\"></span>.</p>\
        <img id=\"takeover-tab\" class=\"live\" alt=\"The browser tab you took over; click on it to click there\">\
        <div id=\"takeover-dialog\" class=\"dialog\" role=\"group\" aria-label=\"The page's dialog\" hidden>\
        <p>The page shows a dialog: <span class=\"said\"></span></p>\
        <p><label for=\"takeover-answer\">Your answer, if it asks a question</label> \
        <input id=\"takeover-answer\" maxlength=\"1024\" autocomplete=\"off\"></p>\
        <div class=\"choices\"></div></div>\
        <form id=\"takeover-type\" class=\"filter\"><label for=\"takeover-text\">Type</label> \
        <input id=\"takeover-text\" maxlength=\"1024\"> <button type=\"submit\">Send text</button></form>\
        <div class=\"choices\" id=\"takeover-keys\"></div></section>\
        <section aria-labelledby=\"activity-title\"><h2 id=\"activity-title\">Activity</h2>\
        <form id=\"activity-filter\" class=\"filter\"><label for=\"since\">From</label> <input type=\"date\" id=\"since\"> \
        <label for=\"until\">to</label> <input type=\"date\" id=\"until\"> \
        <button type=\"button\" id=\"export\">Export</button></form>\
        <ol id=\"activity\" class=\"activity\"></ol></section>";
    shell(StatusCode::OK, &format!("Chat {session}"), Some(&session), body)
}

/// A page of the console's: `main` under the console's header, with its script for a session.
pub(crate) fn shell(status: StatusCode, title: &str, session: Option<&str>, main: &str) -> Response {
    let data = session.map(|s| format!(" data-session=\"{}\"", escape(s))).unwrap_or_default();
    let script = if session.is_some() { "<script src=\"/console.js\" defer></script>" } else { "" };
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} · grant-ledger</title><link rel=\"stylesheet\" href=\"/console.css\">{script}</head>\
         <body{data}><header><p class=\"brand\"><a href=\"/\">grant-ledger</a></p><p id=\"who\"></p>\
         <button type=\"button\" id=\"stop-all\" hidden>Stop everything</button></header>\
         <main><h1>{t}</h1>{main}</main></body></html>",
        t = escape(title)
    );
    let mut response = (status, axum::response::Html(html)).into_response();
    response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, axum::http::HeaderValue::from_static(CSP));
    response
}

/// What an owner reads for a code that says why a task permission did not cover an act.
pub fn reason_words(code: &str) -> String {
    let words = match code {
        "payment" | "payment_field" | "currency" | "in_app_currency" | "money_movement" => {
            "it looks like a payment or moves money"
        }
        "purchase" | "subscription" => "it looks like a purchase or a subscription",
        "authentication" | "credential_field" | "one_time_code_field" => "it signs in or asks for a password or code",
        "sign_out" => "it signs out",
        "account_recovery" | "account_change" => "it changes your account",
        "settings_change" => "it changes settings",
        "permission" => "it grants a permission",
        "identity_field" => "it asks for personal details",
        "legal_acceptance" => "it accepts terms or an agreement",
        "message" => "it sends a message",
        "publication" => "it publishes or posts something",
        "deletion" => "it deletes something",
        "file_transfer" | "file_input" | "download" => "it uploads or downloads a file",
        "administration" => "it is an administrative action",
        "page_outside_scope" | "target_outside_scope" => "it is outside the site area the permission covers",
        "page_sensitive_segment" | "target_sensitive_segment" => "it is on a part of the site kept for you alone",
        "page_unparseable" => "the page's address could not be read",
        "element_disabled" => "the control is disabled",
        "element_unnamed" => "the control has no name to show you",
        "label_truncated" | "facts_missing" | "too_many_options" | "too_many_choices" => {
            "the page could not be read whole"
        }
        "field_kind_not_covered" => "the permission does not cover this kind of field",
        "key_on_choice_control" | "key_not_allowed" => "the permission does not cover this key",
        "option_not_found" => "the option is not in the list",
        "not_routine" => "it is not a routine step",
        "text_too_long" | "text_exceeds_remaining" => "the text is longer than the permission allows",
        "text_control_character" | "text_address" | "text_digit_run" | "text_credential_shaped" => {
            "the text looks like an address, a number or a secret"
        }
        "scroll_not_a_step" => "the scroll is not one of the fixed steps",
        "grant_expired" => "the permission's time ran out",
        "grant_exhausted" | "grant_spent" => "the permission's actions or characters are used up",
        "scope_removed" | "task_grants_disabled" => "task permissions are no longer offered for this site",
        "profile_revoked" | "profile_changed" | "pin_mismatch" => "the browser profile changed",
        "agent_changed" => "the agent changed since you allowed it",
        "policy_changed" => "the rules changed since you allowed it",
        "policy_escalation" => "a rule sends this kind of action to you",
        "session_deleted" | "session_not_found" | "session_not_eligible" => "this chat cannot hold a permission",
        "owner_not_newest" | "turn_not_browser_only" => "you wrote in the chat since you allowed it",
        "run_not_eligible" => "this run cannot use the permission",
        _ => return format!("Your task permission does not cover this ({code})."),
    };
    format!("Your task permission does not cover this: {words}.")
}
