//! One route as documented: what the OpenAPI document says of it and what its handler checks.
//! Each route's entry sits beside its handler; the route table lists them.

use credentials::Scope;
use schemars::{JsonSchema, Schema, SchemaGenerator};

pub(crate) type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

pub(crate) fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One route as documented: what the OpenAPI document says and what the handler checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Doc {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// Every one of these is needed.
    pub scopes: &'static [Scope],
    /// Mounted only for a tenant whose task-grant flag is on: otherwise 404, as any unknown path.
    pub flagged: bool,
    /// A write: a browser session must send its CSRF token.
    pub write: bool,
    pub query: Option<SchemaOf>,
    pub body: Option<SchemaOf>,
    pub reply: SchemaOf,
    /// The reply is a `text/event-stream`.
    pub events: bool,
    /// The reply is an `image/png`.
    pub image: bool,
}

pub(crate) const fn doc(method: &'static str, path: &'static str, summary: &'static str, reply: SchemaOf) -> Doc {
    Doc {
        method,
        path,
        summary,
        scopes: &[],
        flagged: false,
        write: false,
        query: None,
        body: None,
        reply,
        events: false,
        image: false,
    }
}
