//! The auditor's proof beside the hash chains: a Merkle tree over the log (RFC 9162), signed
//! notes (C2SP `signed-note`) and checkpoints (C2SP `tlog-checkpoint`). Pure: no IO.

pub mod checkpoint;
pub mod merkle;
pub mod note;
pub mod verify;

use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::envelope::{RecordedEvent, StreamId, TenantId};

/// One event as an export or a receipt carries it: every stored field, so that whoever holds it
/// recomputes its hash and its leaf.
pub fn event_json(e: &RecordedEvent) -> Value {
    json!({
        "position": e.global_position, "tx_id": e.tx_id.to_string(), "stream": e.stream_id, "version": e.stream_version,
        "event_id": e.event_id, "event_type": e.event_type, "schema_version": e.schema_version, "tenant": e.tenant_id,
        "payload": e.payload, "metadata": e.metadata,
        "recorded_at": e.recorded_at.format(&Rfc3339).unwrap_or_default(),
        "prev_hash": hex::encode(e.prev_hash), "hash": hex::encode(e.hash),
    })
}

/// The event [`event_json`] wrote.
pub fn event_from_json(v: &Value) -> Result<RecordedEvent, String> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).ok_or(format!("an event's {k} is missing"));
    let n = |k: &str| v.get(k).and_then(Value::as_u64).ok_or(format!("an event's {k} is missing"));
    let hash = |k: &str| -> Result<[u8; 32], String> {
        hex::decode(s(k)?).ok().and_then(|b| b.try_into().ok()).ok_or(format!("an event's {k} is not 32 bytes of hex"))
    };
    fn bad(k: &str, e: &dyn std::fmt::Display) -> String {
        format!("an event's {k}: {e}")
    }
    Ok(RecordedEvent {
        global_position: n("position")?,
        tx_id: s("tx_id")?.parse().map_err(|e| bad("tx_id", &e))?,
        stream_id: StreamId::new(s("stream")?).map_err(|e| bad("stream", &e))?,
        stream_version: n("version")?,
        event_id: s("event_id")?.parse().map_err(|e| bad("event_id", &e))?,
        event_type: s("event_type")?.to_owned(),
        schema_version: u32::try_from(n("schema_version")?).map_err(|e| bad("schema_version", &e))?,
        tenant_id: TenantId::new(s("tenant")?).map_err(|e| bad("tenant", &e))?,
        payload: v.get("payload").cloned().ok_or("an event's payload is missing")?,
        metadata: serde_json::from_value(v.get("metadata").cloned().ok_or("an event's metadata is missing")?)
            .map_err(|e| bad("metadata", &e))?,
        recorded_at: time::OffsetDateTime::parse(s("recorded_at")?, &Rfc3339).map_err(|e| bad("recorded_at", &e))?,
        prev_hash: hash("prev_hash")?,
        hash: hash("hash")?,
    })
}
