//! The OpenAPI 3.1 document at `/v1/openapi.json`, made from the route table the router is built
//! from and the JSON Schemas of the very types the handlers read and write.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::docs::Doc;
use crate::problem::Problem;

/// The statuses every authenticated route may answer, beside its own.
const REFUSALS: &[(&str, &str)] = &[
    ("400", "The body is not JSON"),
    ("401", "No credential, or one unknown, expired or revoked"),
    ("403", "A scope is missing, or a browser write lacks its CSRF token"),
    ("404", "Nothing here for this caller: no such object, another owner's, or a route not mounted"),
    ("409", "The object's state forbids this (a stale offer, a card no longer pending, a receipt not signed yet)"),
    ("413", "The body is too large"),
    ("422", "A field breaks a rule; `field` names it"),
    ("429", "Too many requests for this token; see Retry-After"),
    ("503", "The authorizer or the database cannot be reached; nothing was written"),
];

/// The document of the routes `docs` describes.
pub(crate) fn document(docs: impl IntoIterator<Item = Doc>) -> Value {
    let mut generator =
        SchemaSettings::draft2020_12().with(|s| s.definitions_path = "#/components/schemas".into()).into_generator();
    let problem = generator.subschema_for::<Problem>();
    let mut paths = Map::new();
    for d in docs {
        let mut op = Map::new();
        op.insert("summary".into(), d.summary.into());
        op.insert("operationId".into(), operation_id(d.method, d.path).into());
        let mut parameters: Vec<Value> = d
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        if let Some(query) = d.query {
            let schema = serde_json::to_value(query(&mut generator)).unwrap_or_default();
            let resolved = resolve(&schema, &generator);
            if let Some(props) = resolved.get("properties").and_then(Value::as_object) {
                for (name, s) in props {
                    parameters.push(json!({ "name": name, "in": "query", "required": false, "schema": s }));
                }
            }
        }
        if !parameters.is_empty() {
            op.insert("parameters".into(), parameters.into());
        }
        if let Some(body) = d.body {
            let schema = serde_json::to_value(body(&mut generator)).unwrap_or_default();
            op.insert(
                "requestBody".into(),
                json!({ "required": true, "content": { "application/json": { "schema": schema } } }),
            );
        }
        let reply = serde_json::to_value((d.reply)(&mut generator)).unwrap_or_default();
        let media = if d.events {
            "text/event-stream"
        } else if d.image {
            "image/png"
        } else {
            "application/json"
        };
        let mut responses = Map::new();
        responses.insert("200".into(), json!({ "description": "OK", "content": { media: { "schema": reply } } }));
        if d.path != "/v1/openapi.json" {
            let problem = serde_json::to_value(&problem).unwrap_or_default();
            for (status, description) in REFUSALS {
                responses.insert(
                    (*status).into(),
                    json!({ "description": description, "content": { "application/problem+json": { "schema": problem } } }),
                );
            }
            let scopes: Vec<&str> = d.scopes.iter().map(|s| s.code()).collect();
            op.insert("security".into(), json!([{ "ownerToken": scopes }, { "browserSession": scopes }]));
        }
        op.insert("responses".into(), responses.into());
        if d.flagged {
            op.insert("x-mounted-when".into(), "the tenant's task-grant flag is on".into());
        }
        if d.write {
            op.insert("x-csrf-header".into(), crate::CSRF_HEADER.into());
        }
        let entry = paths.entry(d.path.to_owned()).or_insert_with(|| Value::Object(Map::new()));
        if let Some(map) = entry.as_object_mut() {
            map.insert(d.method.into(), op.into());
        }
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": { "title": "grant-ledger owner gateway", "version": "1" },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "ownerToken": { "type": "http", "scheme": "bearer", "description": "glo_ owner token" },
                "browserSession": { "type": "apiKey", "in": "cookie", "name": crate::SESSION_COOKIE },
            },
        },
    })
}

/// `list_approvals`-style ids from method and path.
fn operation_id(method: &str, path: &str) -> String {
    let words: Vec<String> = path
        .trim_start_matches("/v1/")
        .split('/')
        .map(|s| s.trim_start_matches('{').trim_end_matches('}').replace(['-', '.'], "_"))
        .collect();
    format!("{method}_{}", words.join("_"))
}

/// A `$ref` into the generator's definitions, followed once.
fn resolve(schema: &Value, generator: &schemars::SchemaGenerator) -> Value {
    let Some(name) = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.rsplit('/').next()) else {
        return schema.clone();
    };
    generator.definitions().get(name).cloned().unwrap_or_else(|| schema.clone())
}
