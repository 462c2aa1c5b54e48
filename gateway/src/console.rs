//! The owner's console: one server-rendered page per chat session and a small script of our own
//! (`console/console.js`) that fills it from the gateway's own API and event stream. Nothing is
//! fetched from another host, and every string from a website is set as text, never as markup.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::call::{Call, Seg};

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

/// `/`: the owner's inbox: every chat with what waits in it, filled by the script.
pub(crate) async fn home() -> Response {
    let body = "<p id=\"status\" role=\"status\" tabindex=\"-1\"></p>\
        <section aria-label=\"Chats, newest task first\">\
        <ul id=\"chats\" class=\"chats\" aria-live=\"polite\"><li class=\"empty\">Loading your chats…</li></ul></section>\
        <section aria-labelledby=\"open-title\"><h2 id=\"open-title\">Open a chat by its name</h2>\
        <form method=\"get\" action=\"/go\" class=\"filter\"><label for=\"session\">Chat name</label> \
        <input id=\"session\" name=\"session\" required maxlength=\"120\" autocomplete=\"off\"> \
        <button type=\"submit\">Open</button></form></section>";
    shell(StatusCode::OK, "Your chats", Page::Inbox, body)
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
        None => shell(StatusCode::BAD_REQUEST, "Not a chat", Page::Plain, "<p>That is not a chat's name.</p>"),
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
        return shell(StatusCode::NOT_FOUND, "Not a chat", Page::Plain, "<p>That is not a chat's name.</p>");
    }
    let body = "<div id=\"banner\" role=\"region\" aria-label=\"Task permission\"></div>\
        <p id=\"status\" role=\"status\" tabindex=\"-1\"></p>\
        <section aria-labelledby=\"cards-title\"><h2 id=\"cards-title\">Waiting for you</h2>\
        <div id=\"cards\" aria-live=\"polite\" aria-relevant=\"additions\"><p class=\"empty\">Loading…</p></div></section>\
        <section aria-labelledby=\"task-title\"><h2 id=\"task-title\">Your task</h2>\
        <p id=\"task-now\">Loading…</p>\
        <div class=\"choices\"><button type=\"button\" id=\"continue\" hidden>Continue the task</button> \
        <button type=\"button\" id=\"stop-chat\" class=\"stop\">Stop the agent in this chat</button></div>\
        <form id=\"task-form\"><h3>Start a new task</h3>\
        <p><label for=\"task-goal\">What should the agent do?</label><br>\
        <input id=\"task-goal\" required maxlength=\"500\" autocomplete=\"off\"></p>\
        <p><label for=\"task-steps\">The steps, one per line</label><br>\
        <textarea id=\"task-steps\" rows=\"4\" required maxlength=\"10000\"></textarea></p>\
        <p><label for=\"task-start\">Start page</label><br>\
        <input id=\"task-start\" type=\"url\" required maxlength=\"2048\" placeholder=\"https://\" list=\"task-sites\">\
        <datalist id=\"task-sites\"></datalist></p><p id=\"task-sites-said\" class=\"hint\"></p>\
        <button type=\"submit\" class=\"primary\">Start the task</button></form></section>\
        <section id=\"takeover\" aria-labelledby=\"takeover-title\" tabindex=\"-1\" hidden><h2 id=\"takeover-title\">You have the tab</h2>\
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
        <section aria-labelledby=\"agents-title\"><h2 id=\"agents-title\">Agent apps</h2>\
        <p>An agent app (an MCP client) can drive this chat's browser with a key you make here. Each of its \
        actions is checked like any other, and the ones that need you wait here as cards.</p>\
        <form id=\"agent-connect\"><p class=\"check\"><input type=\"checkbox\" id=\"agent-browser-only\"> \
        <label for=\"agent-browser-only\">This app has no tools besides this browser: no files, mail, shell or \
        other connections. Only then can you allow its actions for the task. Otherwise you allow them one at a \
        time.</label></p><p><label for=\"agent-start\">Start page</label> \
        <input id=\"agent-start\" type=\"url\" required maxlength=\"2048\" placeholder=\"https://\"></p>\
        <p><label for=\"agent-minutes\">The key lasts</label> <select id=\"agent-minutes\">\
        <option value=\"60\">1 hour</option><option value=\"480\">8 hours</option>\
        <option value=\"1440\">1 day</option></select> <button type=\"submit\">Make a key</button></p></form>\
        <div id=\"agent-key\" hidden><p>The key, shown this once: copy it now. Put it in the app's settings as \
        its bearer token.</p><input id=\"agent-key-text\" readonly aria-label=\"The agent app's key\">\
        <p id=\"agent-record\"></p></div>\
        <ul id=\"agents\" class=\"agents\"></ul></section>\
        <section aria-labelledby=\"activity-title\"><h2 id=\"activity-title\">Activity</h2>\
        <form id=\"activity-filter\" class=\"filter\"><label for=\"since\">From</label> <input type=\"date\" id=\"since\"> \
        <label for=\"until\">to</label> <input type=\"date\" id=\"until\"> \
        <button type=\"button\" id=\"export\">Export</button></form>\
        <ol id=\"activity\" class=\"activity\"></ol></section>\
";
    shell(StatusCode::OK, &format!("Chat {session}"), Page::Chat(&session), body)
}

/// Which page of the console: the script fills the inbox and a chat; a plain page has none.
pub(crate) enum Page<'a> {
    Plain,
    Inbox,
    Chat(&'a str),
}

/// A page of the console's: `main` under the console's header, with its script for the inbox and
/// a chat.
pub(crate) fn shell(status: StatusCode, title: &str, page: Page<'_>, main: &str) -> Response {
    let data = match page {
        Page::Plain => String::new(),
        Page::Inbox => " data-page=\"inbox\"".into(),
        Page::Chat(s) => format!(" data-page=\"chat\" data-session=\"{}\"", escape(s)),
    };
    let script = if matches!(page, Page::Plain) { "" } else { "<script src=\"/console.js\" defer></script>" };
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} · grant-ledger</title><link rel=\"stylesheet\" href=\"/console.css\">{script}</head>\
         <body{data}><header><nav aria-label=\"Console\"><p class=\"brand\"><a href=\"/\">Your chats</a></p></nav>\
         <p id=\"who\"></p><button type=\"button\" id=\"notify\" aria-pressed=\"false\" hidden>Tell me when a card arrives</button>\
         <button type=\"button\" id=\"stop-all\" hidden>Stop everything, in every chat</button>\
         <button type=\"button\" id=\"sign-out\" hidden>Sign out</button></header>\
         <main><h1>{t}</h1><p id=\"notified\" class=\"hint\" hidden></p>{main}</main></body></html>",
        t = escape(title)
    );
    let mut response = (status, axum::response::Html(html)).into_response();
    response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, axum::http::HeaderValue::from_static(CSP));
    response
}

/// `text` as HTML text: every character that could start markup, escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
