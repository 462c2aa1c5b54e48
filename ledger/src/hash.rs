//! The per-stream hash chain. Each event's hash covers its canonical bytes and the hash of the
//! event before it in the same stream, so editing any stored field breaks every later link.

use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::envelope::{Metadata, RecordedEvent, StreamId, TenantId};

/// The `prev_hash` of a stream's first event.
pub const GENESIS: [u8; 32] = [0; 32];

/// The fields a hash covers, borrowed from wherever they live.
#[derive(Debug)]
pub(crate) struct Hashed<'a> {
    pub(crate) stream_id: &'a StreamId,
    pub(crate) stream_version: u64,
    pub(crate) event_id: uuid::Uuid,
    pub(crate) event_type: &'a str,
    pub(crate) schema_version: u32,
    pub(crate) tenant_id: &'a TenantId,
    pub(crate) payload: &'a serde_json::Value,
    pub(crate) metadata: &'a Metadata,
    pub(crate) recorded_at: OffsetDateTime,
}

impl<'a> Hashed<'a> {
    /// The fields of an event about to be appended at `stream_version`.
    pub(crate) fn of_new(
        stream_id: &'a StreamId,
        stream_version: u64,
        event: &'a crate::envelope::NewEvent,
        tenant_id: &'a TenantId,
        recorded_at: OffsetDateTime,
    ) -> Self {
        Self {
            stream_id,
            stream_version,
            event_id: event.event_id,
            event_type: &event.event_type,
            schema_version: event.schema_version,
            tenant_id,
            payload: &event.payload,
            metadata: &event.metadata,
            recorded_at,
        }
    }

    /// SHA-256 over the previous hash and length-prefixed fields. JSON is serialised with sorted
    /// keys (serde_json's default map), so the bytes do not depend on jsonb's storage order.
    pub(crate) fn hash(&self, prev: &[u8; 32]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"grant-ledger/event/v1");
        h.update(prev);
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        field(self.stream_id.as_str().as_bytes());
        field(&self.stream_version.to_be_bytes());
        field(self.event_id.as_bytes());
        field(self.event_type.as_bytes());
        field(&self.schema_version.to_be_bytes());
        field(self.tenant_id.as_str().as_bytes());
        field(&serde_json::to_vec(self.payload).expect("a Value always serialises"));
        field(&serde_json::to_vec(self.metadata).expect("metadata always serialises"));
        field(&micros(self.recorded_at).to_be_bytes());
        h.finalize().into()
    }
}

/// Timestamps are kept to the microsecond, PostgreSQL's precision.
pub(crate) fn micros(t: OffsetDateTime) -> i128 {
    t.unix_timestamp_nanos() / 1_000
}

/// A time as the store keeps it, to the microsecond: every time an event records is cut here.
pub fn truncate_to_micros(t: OffsetDateTime) -> OffsetDateTime {
    let nanos = t.nanosecond();
    // A smaller nanosecond of the same second is always valid.
    t.replace_nanosecond(nanos - nanos % 1_000).unwrap_or(t)
}

/// Why a stream failed verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("stream {stream}: expected version {expected}, found {found}")]
    VersionGap { stream: StreamId, expected: u64, found: u64 },
    #[error("stream {stream} version {version}: prev_hash does not match the previous event")]
    BrokenLink { stream: StreamId, version: u64 },
    #[error("stream {stream} version {version}: stored hash does not match its content")]
    Tampered { stream: StreamId, version: u64 },
    #[error("stream {stream} version {version}: event belongs to another stream")]
    ForeignEvent { stream: StreamId, version: u64 },
}

/// Checks a whole stream, read in version order from version 1: contiguous versions, each link
/// pointing at the previous hash, and each hash matching the content it covers.
pub fn verify_stream(stream: &StreamId, events: &[RecordedEvent]) -> Result<(), ChainError> {
    let mut prev = GENESIS;
    for (i, e) in events.iter().enumerate() {
        let expected = i as u64 + 1;
        if &e.stream_id != stream {
            return Err(ChainError::ForeignEvent { stream: stream.clone(), version: e.stream_version });
        }
        if e.stream_version != expected {
            return Err(ChainError::VersionGap { stream: stream.clone(), expected, found: e.stream_version });
        }
        if e.prev_hash != prev {
            return Err(ChainError::BrokenLink { stream: stream.clone(), version: e.stream_version });
        }
        if hashed(e).hash(&prev) != e.hash {
            return Err(ChainError::Tampered { stream: stream.clone(), version: e.stream_version });
        }
        prev = e.hash;
    }
    Ok(())
}

/// The hash a stored event's content and `prev_hash` give: equal to its stored hash unless the
/// event was changed.
pub fn content_hash(e: &RecordedEvent) -> [u8; 32] {
    hashed(e).hash(&e.prev_hash)
}

pub(crate) fn hashed(e: &RecordedEvent) -> Hashed<'_> {
    Hashed {
        stream_id: &e.stream_id,
        stream_version: e.stream_version,
        event_id: e.event_id,
        event_type: &e.event_type,
        schema_version: e.schema_version,
        tenant_id: &e.tenant_id,
        payload: &e.payload,
        metadata: &e.metadata,
        recorded_at: e.recorded_at,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;
    use uuid::Uuid;

    use super::{GENESIS, Hashed};
    use crate::envelope::{Metadata, NewEvent, StreamId, TenantId};

    /// The chain's bytes are a stored format: a change of serializer, key order or field layout
    /// must fail here, not in an auditor's verify years later. The expected hashes were computed
    /// independently (Python's hashlib and json with sorted keys) from the layout `hash` documents.
    #[test]
    fn canonical_bytes_and_hashes_are_pinned() {
        let stream = StreamId::new("session-s1").unwrap();
        let tenant = TenantId::new("tenant-a").unwrap();
        let at = datetime!(2026-09-25 10:00:00.123456 UTC);
        let first = NewEvent {
            event_id: Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_0001),
            event_type: "session.created".into(),
            schema_version: 1,
            payload: json!({
                "zeta": 1, "alpha": { "y": [1, "ü"], "b": null }, "text": "ünïcödé ✓",
                "f": [0.1, 2.5, -1.5], "c": "a\u{1}\"b\\"
            }),
            metadata: Metadata {
                principal: "owner-1".into(),
                causation_id: None,
                correlation_id: Some(Uuid::parse_str("7b0a1f0e-5c8d-4d3e-9f11-2a3b4c5d6e7f").unwrap()),
            },
        };
        let second = NewEvent {
            event_id: Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_0002),
            event_type: "session.deleted".into(),
            schema_version: 2,
            payload: json!({ "n": 2 }),
            metadata: Metadata::by("sweeper"),
        };

        // Payload keys sorted whatever order they were written in; floats in shortest form;
        // control characters, quotes and backslashes escaped; non-ASCII as UTF-8, not escaped;
        // metadata in field order, absent ids left out.
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&first.payload).unwrap()).unwrap(),
            r#"{"alpha":{"b":null,"y":[1,"ü"]},"c":"a\u0001\"b\\","f":[0.1,2.5,-1.5],"text":"ünïcödé ✓","zeta":1}"#
        );
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&first.metadata).unwrap()).unwrap(),
            r#"{"principal":"owner-1","correlation_id":"7b0a1f0e-5c8d-4d3e-9f11-2a3b4c5d6e7f"}"#
        );

        let a = Hashed::of_new(&stream, 1, &first, &tenant, at).hash(&GENESIS);
        assert_eq!(hex::encode(a), "af524db054bc2af9876013ed7daa5988eba592bba76d0d804924271906c4bcc5");
        let later = at + time::Duration::microseconds(1);
        let b = Hashed::of_new(&stream, 2, &second, &tenant, later).hash(&a);
        assert_eq!(hex::encode(b), "69c50e45c8e8fca5797f583a5bb284cb727747511ef6af94172f23ea352fdbef");
    }
}
