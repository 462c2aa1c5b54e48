//! What every handler starts from, and the checks every handler shares: ids, UUIDs, positions.

use axum::Json;
use axum::extract::{FromRequestParts, Path};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use proto::v1 as pb;
use schemars::JsonSchema;
use uuid::Uuid;

use crate::api::Position;
use crate::docs::Doc;
use crate::gateway::Gateway;
use crate::guard::{self, Proof, RequestId};
use crate::owners::Owner;
use crate::problem::Problem;

/// A handler's JSON answer, or its problem.
pub(crate) type Answer<T> = Result<Json<T>, Problem>;

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

pub(crate) fn status(s: tonic::Status) -> Problem {
    Problem::from_status(&s)
}

pub(crate) fn entity_id(field: &'static str, value: &str) -> Result<(), Problem> {
    ledger::check_entity_id(field, value).map_err(|e| Problem::invalid(field, e.reason))
}

pub(crate) fn uuid(field: &str, value: &str) -> Result<Uuid, Problem> {
    // The canonical hyphenated form only: one spelling per object.
    Uuid::parse_str(value)
        .ok()
        .filter(|u| u.hyphenated().to_string() == value)
        .ok_or_else(|| Problem::invalid(field, "is a UUID in its hyphenated lowercase form"))
}

pub(crate) fn min_position(text: Option<&str>) -> Result<Option<pb::Position>, Problem> {
    text.map(|t| Position::parse(t).map(Position::to_pb)).transpose()
}

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadQuery {
    /// `<tx_id>.<position>` from a write's answer.
    #[serde(default)]
    pub min_position: Option<String>,
}

/// A route that takes no query.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoQuery {}
