//! What a stored row reads back as: an event, or a stream's head.

use tokio_postgres::Row;
use uuid::Uuid;

use crate::envelope::{Metadata, RecordedEvent, StreamId, TenantId};
use crate::error::ReadError;

pub(super) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn parse_xid(text: &str) -> Result<u64, std::num::ParseIntError> {
    text.parse()
}

/// An event from a row selected with [`COLUMNS`].
pub fn decode_row(row: &Row) -> Result<RecordedEvent, ReadError> {
    let position = to_u64(row.get(0));
    let corrupt = |reason: String| ReadError::Corrupt { position, reason };
    let hash32 =
        |bytes: Vec<u8>| <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| corrupt("hash is not 32 bytes".into()));
    // Straight from the jsonb text into the struct, with no tree in between.
    let metadata =
        row.try_get::<_, tokio_postgres::types::Json<Metadata>>(9).map_err(|e| corrupt(format!("metadata: {e}")))?.0;
    Ok(RecordedEvent {
        global_position: position,
        tx_id: parse_xid(row.get(1)).map_err(|e| corrupt(format!("tx_id: {e}")))?,
        stream_id: StreamId::new(row.get::<_, String>(2)).map_err(|e| corrupt(e.to_string()))?,
        stream_version: to_u64(row.get(3)),
        event_id: row.get(4),
        event_type: row.get(5),
        schema_version: u32::try_from(row.get::<_, i32>(6)).map_err(|e| corrupt(e.to_string()))?,
        tenant_id: TenantId::new(row.get::<_, String>(7)).map_err(|e| corrupt(e.to_string()))?,
        payload: row.get(8),
        metadata,
        recorded_at: row.get(10),
        prev_hash: hash32(row.get(11))?,
        hash: hash32(row.get(12))?,
    })
}

/// One event of an append as chained: its id, stream, version and hash.
pub(super) type Planned = (Uuid, StreamId, u64, [u8; 32]);

/// A stream's newest event as this store last saw it.
#[derive(Debug, Clone)]
pub(super) struct Head {
    pub(super) version: u64,
    pub(super) hash: [u8; 32],
    pub(super) tenant: TenantId,
}

pub(super) fn head_from_row(row: &Row) -> Result<Option<Head>, String> {
    let version: Option<i64> = row.get(1);
    let Some(version) = version else { return Ok(None) };
    let hash: Vec<u8> = row.get(2);
    let tenant: String = row.get(3);
    Ok(Some(Head {
        version: to_u64(version),
        hash: <[u8; 32]>::try_from(hash.as_slice()).map_err(|_| "stored hash is not 32 bytes".to_owned())?,
        tenant: TenantId::new(tenant).map_err(|e| e.to_string())?,
    }))
}
