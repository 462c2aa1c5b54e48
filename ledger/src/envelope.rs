//! The envelope every event travels in, and the shapes of an append.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::invalid::InvalidInput;

/// Bytes of a stream name, tenant id or event type (the events table's CHECKs repeat it).
pub const MAX_ID_LEN: usize = 200;
/// Bytes of a tenant id, so that `category-tenant.id` fits a stream name.
pub const MAX_TENANT_LEN: usize = 64;
/// Bytes of an entity's id (a session, profile, run, message, tool call, snapshot): what every
/// service accepts from a caller, so that an id one takes is never refused by another.
pub const MAX_ENTITY_ID_LEN: usize = 120;
/// The longest category of an entity stream (`deployment`).
const MAX_CATEGORY_LEN: usize = 10;
const _: () = assert!(MAX_CATEGORY_LEN + 1 + MAX_TENANT_LEN + 1 + MAX_ENTITY_ID_LEN <= MAX_ID_LEN);
/// Keeps one append's INSERT under PostgreSQL's 65,535 bind parameters.
pub const MAX_EVENTS_PER_APPEND: usize = 1_000;

/// The characters of every id the ledger stores.
pub const ID_CHARACTERS: &str = "ASCII letters, digits and - _ . :";

fn id_chars(value: &str) -> bool {
    value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

fn check_id(kind: &'static str, value: &str) -> Result<(), InvalidInput> {
    if value.is_empty() || value.len() > MAX_ID_LEN {
        return Err(InvalidInput::new(kind, format!("must be 1 to {MAX_ID_LEN} bytes")));
    }
    if !id_chars(value) {
        return Err(InvalidInput::new(kind, format!("may hold only {ID_CHARACTERS}")));
    }
    Ok(())
}

/// The rule for an entity id from a caller: 1 to [`MAX_ENTITY_ID_LEN`] bytes of
/// [`ID_CHARACTERS`]. Every service checks its ids with this one function.
pub fn check_entity_id(field: &'static str, value: &str) -> Result<(), InvalidInput> {
    if value.is_empty() || value.len() > MAX_ENTITY_ID_LEN || !id_chars(value) {
        return Err(InvalidInput::new(field, format!("is 1 to {MAX_ENTITY_ID_LEN} bytes of {ID_CHARACTERS}")));
    }
    Ok(())
}

/// The SQL expression of [`StreamId::of_entity`]'s name, from SQL expressions for its parts:
/// for statements that join an entity's row to its stream.
pub fn entity_stream_sql(category: &str, tenant: &str, id: &str) -> String {
    format!("({category} || '-' || {tenant} || '.' || {id})")
}

/// A stream's name: `category-id` (`grant-…`, `session-…`) or a bare category (`deployment`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StreamId(String);

impl StreamId {
    pub fn new(value: impl Into<String>) -> Result<Self, InvalidInput> {
        let value = value.into();
        check_id("stream_id", &value)?;
        Ok(Self(value))
    }

    /// `category-id` for an entity's stream.
    pub fn for_entity(category: &str, id: impl fmt::Display) -> Result<Self, InvalidInput> {
        Self::new(format!("{category}-{id}"))
    }

    /// `category-tenant.id`: a tenant's entity stream (`grant-t1.…`, `session-t1.…`). The
    /// statements that join a row to its stream build the same name with [`entity_stream_sql`].
    pub fn of_entity(category: &str, tenant: &TenantId, id: impl fmt::Display) -> Result<Self, InvalidInput> {
        Self::new(format!("{category}-{tenant}.{id}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the first `-`, or the whole name.
    pub fn category(&self) -> &str {
        self.0.split_once('-').map_or(&self.0, |(c, _)| c)
    }
}

impl TryFrom<String> for StreamId {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<StreamId> for String {
    fn from(value: StreamId) -> Self {
        value.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The tenant an event belongs to. A stream never changes tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    pub fn new(value: impl Into<String>) -> Result<Self, InvalidInput> {
        let value = value.into();
        check_id("tenant_id", &value)?;
        Ok(Self(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who caused an event and in answer to what.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// The authenticated principal on whose behalf the command ran.
    pub principal: String,
    /// The event or command this one answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<Uuid>,
    /// Shared by every event of one user-visible operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<Uuid>,
}

impl Metadata {
    pub fn by(principal: impl Into<String>) -> Self {
        Self { principal: principal.into(), ..Self::default() }
    }
}

/// An event about to be appended. Its `event_id` is the idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_id: Uuid,
    pub event_type: String,
    pub schema_version: u32,
    pub payload: Value,
    pub metadata: Metadata,
}

/// What the writer believes a stream's version is before its append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// The stream must not exist yet.
    NoStream,
    /// The stream's newest event must have exactly this version (versions start at 1).
    At(u64),
    /// No check; the store still serialises writers on the stream.
    Any,
}

impl ExpectedVersion {
    pub(crate) fn admits(self, current: u64) -> bool {
        match self {
            Self::NoStream => current == 0,
            Self::At(v) => current == v,
            Self::Any => true,
        }
    }
}

/// Events for one stream within an append.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamAppend {
    pub stream_id: StreamId,
    pub expected: ExpectedVersion,
    pub events: Vec<NewEvent>,
}

/// One atomic append: every stream's events commit together or none do.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendRequest {
    pub tenant_id: TenantId,
    pub streams: Vec<StreamAppend>,
}

impl AppendRequest {
    pub fn single(tenant_id: TenantId, stream_id: StreamId, expected: ExpectedVersion, events: Vec<NewEvent>) -> Self {
        Self { tenant_id, streams: vec![StreamAppend { stream_id, expected, events }] }
    }

    /// Refuses empty appends, a stream named twice and an event id used twice.
    pub(crate) fn validate(&self) -> Result<(), InvalidInput> {
        if self.streams.is_empty() {
            return Err(InvalidInput::new("streams", "an append needs at least one stream"));
        }
        let total: usize = self.streams.iter().map(|s| s.events.len()).sum();
        if total > MAX_EVENTS_PER_APPEND {
            return Err(InvalidInput::new("events", format!("at most {MAX_EVENTS_PER_APPEND} events in one append")));
        }
        let mut streams = std::collections::HashSet::new();
        let mut ids = std::collections::HashSet::new();
        for s in &self.streams {
            if !streams.insert(&s.stream_id) {
                return Err(InvalidInput::new("streams", format!("stream {} named twice", s.stream_id)));
            }
            if s.events.is_empty() {
                return Err(InvalidInput::new("events", format!("no events for stream {}", s.stream_id)));
            }
            for e in &s.events {
                if !ids.insert(e.event_id) {
                    return Err(InvalidInput::new("event_id", format!("{} used twice", e.event_id)));
                }
                if e.event_type.is_empty() || e.event_type.len() > MAX_ID_LEN {
                    return Err(InvalidInput::new("event_type", "must be 1 to 200 bytes"));
                }
                if e.schema_version == 0 || i32::try_from(e.schema_version).is_err() {
                    return Err(InvalidInput::new("schema_version", "must be at least 1"));
                }
                if let Some(path) = nul_path(&e.payload) {
                    return Err(InvalidInput::new("payload", format!("{path} may not contain NUL characters")).at(path));
                }
            }
        }
        Ok(())
    }

    /// Every event id of the request, in request order.
    pub fn event_ids(&self) -> Vec<Uuid> {
        self.streams.iter().flat_map(|s| s.events.iter().map(|e| e.event_id)).collect()
    }
}

/// PostgreSQL's jsonb cannot store U+0000; refuse it up front so both stores agree. Returns the
/// path of the first value holding one (`view.element_name`, `scopes[0].origin`), so a caller can
/// name the field that carried it.
fn nul_path(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => s.contains('\0').then(String::new),
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(i, v)| nul_path(v).map(|p| format!("[{i}]{}", dotted(&p))))
        }
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k.contains('\0') {
                return Some(k.escape_debug().to_string());
            }
            nul_path(v).map(|p| format!("{k}{}", dotted(&p)))
        }),
        _ => None,
    }
}

fn dotted(rest: &str) -> String {
    if rest.is_empty() || rest.starts_with('[') { rest.to_owned() } else { format!(".{rest}") }
}

/// Where a reader of the global log stands: the last `(tx_id, position)` it delivered.
/// Ordering by transaction id first is what makes the read gap-safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    pub tx_id: u64,
    pub position: u64,
}

impl Checkpoint {
    pub const START: Self = Self { tx_id: 0, position: 0 };
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    pub global_position: u64,
    pub tx_id: u64,
    pub stream_id: StreamId,
    pub stream_version: u64,
    pub event_id: Uuid,
    pub event_type: String,
    pub schema_version: u32,
    pub tenant_id: TenantId,
    pub payload: Value,
    pub metadata: Metadata,
    pub recorded_at: OffsetDateTime,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

impl RecordedEvent {
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint { tx_id: self.tx_id, position: self.global_position }
    }

    /// Same content as `event` (ignoring where it was stored)?
    pub(crate) fn same_content(&self, tenant: &TenantId, stream: &StreamId, event: &NewEvent) -> bool {
        &self.tenant_id == tenant
            && &self.stream_id == stream
            && self.event_type == event.event_type
            && self.schema_version == event.schema_version
            && self.payload == event.payload
            && self.metadata == event.metadata
    }
}

/// Where each appended event landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub event_id: Uuid,
    pub stream_id: StreamId,
    pub stream_version: u64,
    pub global_position: u64,
}

/// The result of a successful append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    pub tx_id: u64,
    /// In request order.
    pub events: Vec<Appended>,
    /// True when every event id was already stored with the same content: nothing new was written.
    pub replayed: bool,
}

impl AppendOutcome {
    /// The checkpoint a reader must pass to have seen this whole append.
    pub fn checkpoint(&self) -> Checkpoint {
        let position = self.events.iter().map(|e| e.global_position).max().unwrap_or(0);
        Checkpoint { tx_id: self.tx_id, position }
    }

    /// The newest version of `stream` this append wrote.
    pub fn version_of(&self, stream: &StreamId) -> Option<u64> {
        self.events.iter().filter(|e| &e.stream_id == stream).map(|e| e.stream_version).max()
    }
}
