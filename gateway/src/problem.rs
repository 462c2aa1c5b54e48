//! Every refusal as `application/problem+json` (RFC 9457) with a stable `code`: the one table
//! from what went wrong to an HTTP status. Nothing that answers with one of these has written
//! anything, except where a code says so.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tonic::Code;
use tonic_types::StatusExt;

/// One refusal.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Problem {
    /// `urn:grant-ledger:problem:<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    /// The stable code a client branches on.
    pub code: String,
    pub detail: String,
    /// The request field at fault, for 422.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Seconds after which a retry may succeed (429, 503).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Filled in by the request-id layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Problem {
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("urn:grant-ledger:problem:{code}"),
            title: status.canonical_reason().unwrap_or("Error"),
            status: status.as_u16(),
            code: code.to_owned(),
            detail: detail.into(),
            field: None,
            retry_after: None,
            request_id: None,
        }
    }

    /// 400: the body is not JSON, or not the JSON of this route's shape.
    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_request", detail)
    }

    /// 422: `field` breaks a rule.
    pub fn invalid(field: &str, detail: impl Into<String>) -> Self {
        Self { field: Some(field.to_owned()), ..Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", detail) }
    }

    pub fn unauthenticated(detail: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", detail)
    }

    pub fn forbidden(code: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, detail)
    }

    /// 404, the same for a route that does not exist, an object that does not, and another
    /// principal's or tenant's object: nothing tells them apart.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "there is nothing here for this caller")
    }

    /// 503: the authorizer or the database cannot be reached; nothing was written.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self { retry_after: Some(1), ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail) }
    }

    /// 504: the call was not answered in time; a write may or may not have taken effect, so
    /// the client reads the object back before trying again.
    pub fn outcome_unknown() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "outcome_unknown",
                "the authorizer did not answer in time; read the card or grant back to see whether it changed",
            )
        }
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }

    /// The problem for an authorizer status, the gRPC call a route wraps.
    pub fn from_status(s: &tonic::Status) -> Self {
        let reason = s.get_details_error_info().map(|i| i.reason);
        match s.code() {
            Code::InvalidArgument => {
                let violation = s.get_details_bad_request().and_then(|b| b.field_violations.into_iter().next());
                match violation {
                    Some(v) => Self::invalid(&v.field, v.description),
                    None => Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", s.message()),
                }
            }
            // A task-grant call on a tenant whose flag is off answers as a route not mounted.
            Code::NotFound | Code::Unimplemented => Self::not_found(),
            Code::FailedPrecondition | Code::AlreadyExists => {
                let code = reason.map_or_else(|| "conflict".to_owned(), |r| r.to_ascii_lowercase());
                Self::new(StatusCode::CONFLICT, &code, s.message())
            }
            Code::Aborted => Self {
                retry_after: Some(1),
                ..Self::new(
                    StatusCode::CONFLICT,
                    "concurrent_change",
                    "other requests changed this; nothing was written; retry",
                )
            },
            Code::PermissionDenied => Self::forbidden("forbidden", s.message()),
            Code::ResourceExhausted => {
                Self { retry_after: Some(1), ..Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", s.message()) }
            }
            Code::Unavailable => Self::unavailable("the authorizer cannot be reached now; nothing was written"),
            // The authorizer may have finished a write it could not answer: read it back.
            Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => Self::outcome_unknown(),
            // The gateway's own credential was refused: the deployment's fault, not the owner's.
            Code::Unauthenticated => {
                tracing::error!(message = s.message(), "the authorizer refused the gateway's credential");
                Self::internal("the gateway is not configured to reach the authorizer")
            }
            _ => {
                tracing::error!(code = ?s.code(), message = s.message(), "the authorizer failed");
                Self::internal("the authorizer failed")
            }
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.retry_after;
        let unauthenticated = status == StatusCode::UNAUTHORIZED;
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(seconds) = retry {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if unauthenticated {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"grant-ledger\""));
        }
        // The request-id layer writes the id into the body it finds here.
        response.extensions_mut().insert(ProblemBody);
        response
    }
}

/// Marks a response whose body is a [`Problem`], for the layer that adds the request id.
#[derive(Debug, Clone, Copy)]
pub struct ProblemBody;
