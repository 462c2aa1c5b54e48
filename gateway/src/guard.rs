//! What every request passes through: a request id, a deadline, the security headers, the body
//! limit, the CSRF check of a browser session's writes, and the per-token rate limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::problem::{Problem, ProblemBody};
use crate::{CSRF_HEADER, MAX_BODY_BYTES, REQUEST_TIMEOUT};

/// The connection a request came on, so that an authenticated request marks it as one (an
/// unauthenticated connection is closed after the listener's first-call timeout).
#[derive(Debug, Clone)]
pub(crate) struct Proof {
    pub(crate) registry: transport::Registry,
    pub(crate) id: u64,
}

/// This request's id: the caller's `x-request-id` when it is a short token, else a new one.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) String);

fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map_or_else(|| Uuid::new_v4().simple().to_string(), str::to_owned)
}

/// The outer layer: id, deadline, size limit, headers, and the id written into a problem body.
pub(crate) async fn edge(mut req: Request, next: Next) -> Response {
    let id = request_id(req.headers());
    let started = std::time::Instant::now();
    let route = req.extensions().get::<axum::extract::MatchedPath>().map(|m| m.as_str().to_owned());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let too_large = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_BODY_BYTES);
    req.extensions_mut().insert(RequestId(id.clone()));
    let streaming = path.ends_with("/events");
    // Every line logged while serving the request carries its id.
    let span = tracing::info_span!("request", request_id = %id);
    let run = tracing::Instrument::instrument(next.run(req), span);
    let mut response = if too_large {
        too_large_problem().into_response()
    } else if streaming {
        // A stream lives past any deadline; its own reads are bounded.
        run.await
    } else {
        match tokio::time::timeout(REQUEST_TIMEOUT, run).await {
            Ok(r) => r,
            Err(_) => Problem::outcome_unknown().into_response(),
        }
    };
    if response.extensions().get::<ProblemBody>().is_some() {
        response = with_id(response, &id).await;
    }
    let status = response.status();
    tracing::info!(request_id = %id, %method, %path, status = status.as_u16(), "request");
    crate::metrics::request(&method, route.as_deref(), status.as_u16(), started.elapsed());
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&id) {
        headers.insert("x-request-id", v);
    }
    for (name, value) in SECURITY_HEADERS {
        headers.entry(*name).or_insert(HeaderValue::from_static(value));
    }
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    // An idle keep-alive connection is closed after the 10 s head-read timeout: say so, so a
    // client opens a new one rather than racing the close.
    if !streaming {
        headers.insert("keep-alive", HeaderValue::from_static("timeout=9"));
    }
    response
}

pub(crate) fn too_large_problem() -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("a request body is at most {MAX_BODY_BYTES} bytes"),
    )
}

/// Every response carries these; a page (the console) may set a stricter or looser CSP itself.
const SECURITY_HEADERS: &[(&str, &str)] = &[
    ("content-security-policy", "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
    ("permissions-policy", "camera=(), microphone=(), geolocation=(), payment=()"),
];

/// HSTS, for a listener that speaks TLS.
pub(crate) async fn hsts(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    response.headers_mut().insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    response
}

async fn with_id(response: Response, id: &str) -> Response {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("request_id".into(), id.into());
    }
    let mut parts = parts;
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(serde_json::to_vec(&value).unwrap_or_default()))
}

/// Reads a request body of at most [`MAX_BODY_BYTES`] as JSON of type `T`: 415 for another
/// media type, 413 past the limit, 400 for what is not JSON, 422 for JSON that breaks a field.
pub(crate) async fn json_body<T: serde::de::DeserializeOwned>(req: Request) -> Result<T, Problem> {
    let (parts, body) = req.into_parts();
    let media = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = media.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|_| too_large_problem())?;
    parse_json(&bytes)
}

/// A JSON document of type `T`, told apart: 400 for what is not JSON, 422 naming the field.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Problem::malformed(format!("the body is not one JSON value: {e}")))?;
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let at = e.path().to_string();
        let message = e.inner().to_string();
        let field = if at == "." { field_of(&message).unwrap_or_else(|| "body".into()) } else { at };
        Problem::invalid(&field, message)
    })
}

/// The field a serde message names: "unknown field `x`", "missing field `x`".
fn field_of(message: &str) -> Option<String> {
    ["unknown field `", "missing field `"]
        .iter()
        .find_map(|marker| message.split(marker).nth(1))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_owned)
}

/// A query string as type `T`: 422 naming what is wrong (an unknown parameter included).
pub(crate) fn query<T: serde::de::DeserializeOwned + Default>(raw: Option<&str>) -> Result<T, Problem> {
    match raw {
        None | Some("") => Ok(T::default()),
        Some(q) => serde_urlencoded::from_str(q).map_err(|e| {
            let text = e.to_string();
            Problem::invalid(&field_of(&text).unwrap_or_else(|| "query".into()), format!("the query: {text}"))
        }),
    }
}

/// The value of cookie `name`, if the request carries exactly one.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned());
    let first = found.next()?;
    // Two cookies of one name means something else set one: believe neither.
    found.next().is_none().then_some(first)
}

/// A browser session's write must carry its CSRF token, and must not come from another site.
pub(crate) fn check_csrf(headers: &HeaderMap, session_secret: &str) -> Result<(), Problem> {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "same-site")) {
        return Err(Problem::forbidden("csrf_refused", "a write from another site is refused"));
    }
    let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
    let expected = crate::owners::csrf_token(session_secret);
    if !constant_time_eq(sent.as_bytes(), expected.as_bytes()) {
        return Err(Problem::forbidden("csrf_refused", format!("a browser session's write carries {CSRF_HEADER}")));
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Requests per token per minute, on this replica: a token bucket per API token that refills
/// continuously. With N replicas a token may make up to N times as many; it only ever refuses.
#[derive(Debug)]
pub struct RateLimit {
    per_minute: u32,
    buckets: Mutex<HashMap<Uuid, (f64, Instant)>>,
}

/// Past this many tokens tracked, full buckets are forgotten (they would admit anyway).
const MAX_BUCKETS: usize = 100_000;

impl RateLimit {
    pub fn per_minute(per_minute: u32) -> Self {
        Self { per_minute: per_minute.max(1), buckets: Mutex::default() }
    }

    pub(crate) fn admit(&self, token: Uuid) -> Result<(), Problem> {
        let capacity = f64::from(self.per_minute);
        let rate = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS {
            buckets.retain(|_, (level, at)| *level + now.duration_since(*at).as_secs_f64() * rate < capacity);
        }
        let (level, at) = buckets.entry(token).or_insert((capacity, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * rate).min(capacity);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - *level) / rate).ceil();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a few seconds, positive
        let retry = Duration::from_secs_f64(wait).as_secs().max(1);
        Err(Problem {
            retry_after: Some(retry),
            ..Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("at most {} requests a minute per token", self.per_minute),
            )
        })
    }
}

/// Streams one token may hold open on one replica, and all of a replica's.
pub const MAX_STREAMS_PER_TOKEN: usize = 4;
pub const MAX_STREAMS: usize = 512;

/// The open streams of a replica, by token: a cap that only refuses, like the rate limit.
#[derive(Debug, Default, Clone)]
pub(crate) struct Streams(Arc<Mutex<(usize, HashMap<uuid::Uuid, usize>)>>);

/// One open stream's place, given back when the stream is dropped.
pub(crate) struct Slot {
    streams: Streams,
    token: uuid::Uuid,
}

impl Streams {
    pub(crate) fn open(&self, token: uuid::Uuid) -> Result<Slot, Problem> {
        let mut open = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mine = open.1.get(&token).copied().unwrap_or(0);
        if mine >= MAX_STREAMS_PER_TOKEN || open.0 >= MAX_STREAMS {
            return Err(Problem {
                retry_after: Some(30),
                ..Problem::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "too_many_streams",
                    format!("a token holds at most {MAX_STREAMS_PER_TOKEN} event streams here; close one"),
                )
            });
        }
        open.0 += 1;
        open.1.insert(token, mine + 1);
        Ok(Slot { streams: self.clone(), token })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.streams.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.token);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_admits_its_capacity_then_refuses() {
        let limit = RateLimit::per_minute(3);
        let t = Uuid::new_v4();
        for _ in 0..3 {
            assert!(limit.admit(t).is_ok());
        }
        let refused = limit.admit(t).unwrap_err();
        assert_eq!((refused.status, refused.retry_after), (429, Some(20)));
        assert!(limit.admit(Uuid::new_v4()).is_ok(), "another token has its own bucket");
    }

    #[test]
    fn two_cookies_of_one_name_are_believed_neither() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; __Host-gl_session=x"));
        assert_eq!(cookie(&h, "__Host-gl_session").as_deref(), Some("x"));
        h.append(header::COOKIE, HeaderValue::from_static("__Host-gl_session=y"));
        assert_eq!(cookie(&h, "__Host-gl_session"), None);
    }

    #[test]
    fn json_errors_are_told_apart() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: u32,
        }
        assert_eq!(parse_json::<T>(b"{").unwrap_err().status, 400);
        assert_eq!(parse_json::<T>(b"{\"a\":1} x").unwrap_err().status, 400);
        let unknown = parse_json::<T>(b"{\"a\":1,\"b\":2}").unwrap_err();
        assert_eq!((unknown.status, unknown.field.as_deref()), (422, Some("b")));
        let missing = parse_json::<T>(b"{}").unwrap_err();
        assert_eq!((missing.status, missing.field.as_deref()), (422, Some("a")));
        assert_eq!(parse_json::<T>(b"{\"a\":-1}").unwrap_err().status, 422);
    }
}
