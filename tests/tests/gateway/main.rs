//! The owner's gateway over real HTTP, on two gateway and two authorizer replicas sharing one
//! PostgreSQL: resolve, list, get, revoke and activity, each refusal typed and writing nothing,
//! browser sign-in with its cookie and CSRF, the route census with the flag off and on, the
//! event stream, and read-your-writes across replicas.

use std::time::Duration;

use credentials::Scope;
use proto::v1::authorize_reply::Decision;
use serde_json::json;
use tests::gateway::{GatewayStack, OFF, ON, SCOPE};
use tests::http::{Call, Reply, next_event};

const ALL: &[Scope] = &[Scope::ApprovalResolve, Scope::GrantRead, Scope::GrantWrite];

fn resolve_body(resolution: &str) -> serde_json::Value {
    json!({ "resolution": resolution })
}

fn for_task(origin: &str, prefix: &str) -> serde_json::Value {
    json!({ "resolution": "approve_for_task", "offered_origin": origin, "offered_path_prefix": prefix })
}

fn position(r: &Reply) -> String {
    let p = &r.json()["position"];
    format!("{}.{}", p["tx_id"], p["position"])
}

fn set_cookie(r: &Reply) -> String {
    r.header("set-cookie").unwrap_or_default().to_owned()
}

mod owner;
mod refusals;
mod sign_in;
