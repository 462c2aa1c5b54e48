//! Signing in with a one-time link: the page the link opens, and the post that spends it.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::call::Call;
use crate::console::escape;
use crate::guard;
use crate::owners::Kind;
use crate::settings::SESSION_COOKIE;

/// The page a sign-in link opens. Opening it spends nothing (a link preview or prefetch cannot
/// use it up): the button posts the code.
pub(super) async fn sign_in_page(call: Call) -> Response {
    #[derive(Default, serde::Deserialize)]
    struct Q {
        #[serde(default)]
        code: String,
        /// The chat session to open once signed in.
        #[serde(default)]
        session: String,
    }
    let q: Q = guard::query(call.query.as_deref()).unwrap_or_default();
    if !crate::owners::well_formed(&q.code, Kind::Link) {
        return page(
            StatusCode::BAD_REQUEST,
            "This sign-in link is not whole",
            "Copy the whole link grantctl printed.",
        );
    }
    let (tenant, principal) = match call.gateway.owners().peek_link(&q.code).await {
        Ok(Some(who)) => who,
        Ok(None) => return unusable_link(),
        Err(e) => {
            tracing::warn!(error = %e, "sign-in page failed");
            return page(StatusCode::SERVICE_UNAVAILABLE, "Sign-in is unavailable", "Try again in a moment.");
        }
    };
    // Whom the link signs in, said before the press: a link someone else sent signs this
    // browser in as them, and the page must make that plain.
    let form = format!(
        "<p>This link signs this browser in as <strong>{}</strong> of <strong>{}</strong>. If that is not \
         you, close this page.</p><form method=\"post\" action=\"/sign-in\"><input type=\"hidden\" \
         name=\"code\" value=\"{}\">{}<button type=\"submit\">Sign in as {}</button></form>",
        escape(&principal),
        escape(&tenant),
        q.code,
        crate::console::session_path(&q.session)
            .map(|_| format!("<input type=\"hidden\" name=\"session\" value=\"{}\">", escape(&q.session)))
            .unwrap_or_default(),
        escape(&principal)
    );
    page(StatusCode::OK, "Sign in to grant-ledger", &form)
}

pub(super) async fn sign_in(call: Call, req: Request) -> Response {
    if !same_origin(&call.headers, call.gateway.0.tls) {
        return page(StatusCode::FORBIDDEN, "Sign-in refused", "A sign-in must come from this site's own page.");
    }
    let Ok(bytes) = axum::body::to_bytes(req.into_body(), crate::MAX_BODY_BYTES).await else {
        return guard::too_large_problem().into_response();
    };
    #[derive(serde::Deserialize)]
    struct Form {
        code: String,
        #[serde(default)]
        session: String,
    }
    let Ok(form) = serde_urlencoded::from_bytes::<Form>(&bytes) else {
        return page(StatusCode::BAD_REQUEST, "Sign-in refused", "The form was not sent whole.");
    };
    match call.gateway.owners().sign_in(&form.code).await {
        Ok(Some((secret, owner))) => {
            tracing::info!(tenant = %owner.tenant, principal = %owner.principal, "signed in by link");
            let cookie = format!(
                "{SESSION_COOKIE}={secret}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={}",
                crate::owners::SESSION_LIFETIME.as_secs()
            );
            // Only a chat session's own page: never a place the form names freely.
            let to = crate::console::session_path(&form.session).unwrap_or_else(|| "/".into());
            let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, v);
            }
            response
        }
        Ok(None) => unusable_link(),
        Err(e) => {
            tracing::warn!(error = %e, "sign-in failed");
            page(StatusCode::SERVICE_UNAVAILABLE, "Sign-in is unavailable", "Try again in a moment.")
        }
    }
}

pub(super) fn unusable_link() -> Response {
    page(
        StatusCode::UNAUTHORIZED,
        "This sign-in link cannot be used",
        "It was used already, has expired or was revoked. Ask for a new one: grantctl owners link.",
    )
}

/// A sign-in form is taken only from this origin's own page. A browser says where a request
/// comes from in `Sec-Fetch-Site`, which no page can set, and that alone decides; one that does
/// not send it must name this exact origin in `Origin` (under `no-referrer` a browser may send
/// `Origin: null`, which is refused). A post naming neither is not a browser's and is refused.
pub(super) fn same_origin(headers: &HeaderMap, tls: bool) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let scheme = if tls { "https" } else { "http" };
    headers.get(header::ORIGIN).is_some_and(|o| o.as_bytes() == format!("{scheme}://{host}").as_bytes())
}

pub(super) fn page(status: StatusCode, title: &str, body: &str) -> Response {
    crate::console::shell(status, title, crate::console::Page::Plain, body)
}
