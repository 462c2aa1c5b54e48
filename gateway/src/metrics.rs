//! The gateway's metrics: each request by method, route template (never the raw path, so ids
//! never become series) and status, and how long owners look at a card before they answer it
//! (the record's warning: a collapse in dwell time is an incident). One set per process.

use std::sync::LazyLock;
use std::time::Duration;

use telemetry::{DWELL_BUCKETS, Histograms, LATENCY_BUCKETS, Registry};

#[derive(Debug)]
pub struct GatewayMetrics {
    requests: Histograms<3>,
    dwell: Histograms<1>,
}

static METRICS: LazyLock<GatewayMetrics> = LazyLock::new(|| GatewayMetrics {
    requests: telemetry::histograms(&LATENCY_BUCKETS),
    dwell: telemetry::histograms(&DWELL_BUCKETS),
});

/// Registers the gateway's metrics in `registry` (once per process).
pub fn register(registry: &mut Registry) {
    registry.register(
        "http_server_request_duration_seconds",
        "Time to answer a request, by method, route template and status",
        METRICS.requests.clone(),
    );
    registry.register(
        "gateway_card_dwell_seconds",
        "How long a card was shown before the owner answered it, by answer",
        METRICS.dwell.clone(),
    );
}

/// One request answered.
pub(crate) fn request(method: &axum::http::Method, route: Option<&str>, status: u16, took: Duration) {
    let method = match *method {
        axum::http::Method::GET => "GET",
        axum::http::Method::POST => "POST",
        axum::http::Method::PUT => "PUT",
        axum::http::Method::DELETE => "DELETE",
        axum::http::Method::PATCH => "PATCH",
        axum::http::Method::HEAD => "HEAD",
        axum::http::Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let route = route.map_or("unmatched", route_label);
    let labels = [("method", method), ("route", route), ("status", status_label(status))];
    METRICS.requests.get_or_create(&labels).observe(took.as_secs_f64());
}

/// A card answered `resolution` after it was shown for `shown_for`.
pub(crate) fn dwell(resolution: &'static str, shown_for: Duration) {
    METRICS.dwell.get_or_create(&[("resolution", resolution)]).observe(shown_for.as_secs_f64());
}

fn status_label(status: u16) -> &'static str {
    const KNOWN: [&str; 22] = [
        "200", "201", "202", "204", "301", "302", "303", "304", "400", "401", "403", "404", "405", "406", "409", "410",
        "413", "415", "422", "429", "500", "503",
    ];
    let s = status.to_string();
    KNOWN.into_iter().find(|k| *k == s).unwrap_or(match status {
        100..=399 => "other_success",
        400..=499 => "other_client_error",
        _ => "other_server_error",
    })
}

/// The most route labels a replica keeps: far above the routes it serves.
const MAX_ROUTES: usize = 64;

/// A matched route's label, as a `&'static str` the metric family keeps. The router matches only
/// the templates it was built with, so the set is closed; the cap keeps it bounded regardless.
fn route_label(route: &str) -> &'static str {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = seen.iter().find(|l| **l == route) {
        return known;
    }
    if seen.len() >= MAX_ROUTES {
        return "unmatched";
    }
    let label: &'static str = Box::leak(route.to_owned().into_boxed_str());
    seen.push(label);
    label
}
