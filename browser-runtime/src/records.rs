//! The task record the runtime types from: `<dir>/<tenant>/<owner>/<run id>.json`, an object of
//! field id to value, written by whoever prepares the run for its owner. The model names a field
//! id; the value reaches the page, and the authorizer sealed (`Observe` with the run, for the
//! same owner's session only, the text only when it does not read as a secret).

use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("{0}")]
    Invalid(String),
    #[error("the task record of run {run:?} has no field {field:?}")]
    NoField { run: String, field: String },
    #[error("the task record of run {0:?} cannot be read: {1}")]
    Unreadable(String, String),
    #[error("the task record of run {0:?} is not an object of field id to text: {1}")]
    Malformed(String, String),
}

#[derive(Debug, Clone)]
pub struct RecordStore {
    dir: PathBuf,
}

/// An id used as a file name: letters, digits, `_` and `-`, 1 to 128 of them.
/// An owner's folder: a principal id (the ledger's characters), never `.` or `..`.
fn safe_owner(owner: &str) -> Result<(), RecordError> {
    let chars = owner.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if (1..=120).contains(&owner.len()) && chars && owner.bytes().any(|b| b != b'.') {
        Ok(())
    } else {
        Err(RecordError::Invalid("the owner is no principal id a folder can name".into()))
    }
}

fn safe_id(what: &str, id: &str) -> Result<(), RecordError> {
    let ok = (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(RecordError::Invalid(format!("{what} must be 1-128 letters, digits, _ or -"))) }
}

/// A WebDriver key code point (U+E000..U+F8FF) in a value would press a key instead of typing
/// text; a control character would do the same for Enter or Tab.
pub fn typeable(value: &str) -> bool {
    value.chars().all(|c| !('\u{e000}'..='\u{f8ff}').contains(&c) && !c.is_control())
}

/// Bytes of a record field's id: a key of the task record's JSON, never a stream name, so any
/// text without control characters (`first name`, `billing/zip`).
pub use proto::limits::{MAX_FIELD_ID_LEN, check_field_id};

/// The record's own setting beside its fields: the language its owner writes dates in (`en-GB`),
/// by which a form's dates are read where the page says nothing. Keys beginning with `$` are the
/// record's settings, never fields.
pub const LOCALE_KEY: &str = "$locale";

fn setting(key: &str) -> bool {
    key.starts_with('$')
}

impl RecordStore {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The record's `$locale`, when it has one that reads as a language tag.
    pub fn locale(&self, tenant: &str, owner: &str, run: &str) -> Result<Option<String>, RecordError> {
        let record = self.record(tenant, owner, run)?.unwrap_or_default();
        let tag = |t: &&String| {
            (2..=35).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        Ok(record.get(LOCALE_KEY).filter(tag).cloned())
    }

    pub fn value(&self, tenant: &str, owner: &str, run: &str, field: &str) -> Result<String, RecordError> {
        check_field_id(field).map_err(|why| RecordError::Invalid(format!("field_id {why}")))?;
        let record = self.record(tenant, owner, run)?.unwrap_or_default();
        let value = record
            .get(field)
            .filter(|_| !setting(field))
            .cloned()
            .ok_or_else(|| RecordError::NoField { run: run.into(), field: field.into() })?;
        if !typeable(&value) {
            return Err(RecordError::Invalid(format!(
                "the value of field {field:?} holds control or key characters and is not typed"
            )));
        }
        Ok(value)
    }

    /// Every field of the run's record a type could type (typeable, within the longest text a
    /// type may be), in field-id order; none when the run has no record.
    pub fn fields(&self, tenant: &str, owner: &str, run: &str) -> Result<Vec<(String, String)>, RecordError> {
        let mut fields: Vec<_> = self
            .record(tenant, owner, run)?
            .unwrap_or_default()
            .into_iter()
            .filter(|(f, v)| {
                !setting(f)
                    && check_field_id(f).is_ok()
                    && typeable(v)
                    && v.chars().count() <= proto::limits::MAX_TEXT_ACT_CHARS
            })
            .collect();
        fields.sort();
        Ok(fields)
    }

    fn record(&self, tenant: &str, owner: &str, run: &str) -> Result<Option<HashMap<String, String>>, RecordError> {
        safe_id("the tenant", tenant)?;
        safe_owner(owner)?;
        safe_id("run_id", run)?;
        let path = self.dir.join(tenant).join(owner).join(format!("{run}.json"));
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(RecordError::Unreadable(run.into(), e.to_string())),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| RecordError::Malformed(run.into(), e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_leave_the_directory() {
        let store = RecordStore::new(PathBuf::from("/nonexistent"));
        for run in ["..", "../x", "a/b", "", "a.json"] {
            assert!(matches!(store.value("t", "owner", run, "f"), Err(RecordError::Invalid(_))), "{run}");
        }
        assert!(matches!(store.value("t", "owner", "run1", "f"), Err(RecordError::NoField { .. })));
    }

    #[test]
    fn a_field_id_is_any_short_text_without_control_characters() {
        for ok in ["answer", "first name", "billing/zip", "email@work", "Straße", "q[1]"] {
            assert_eq!(check_field_id(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a\nb", "a\0b", &"x".repeat(MAX_FIELD_ID_LEN + 1)] {
            assert!(check_field_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn field_kinds_are_spelt_as_the_page_script_and_serde_spell_them() {
        for kind in classifier::FieldKind::ALL {
            let read: classifier::FieldKind = serde_json::from_value(serde_json::json!(kind.code())).unwrap();
            assert_eq!(read, kind);
        }
    }

    #[test]
    fn the_records_locale_is_a_setting_not_a_field() {
        let dir = std::env::temp_dir().join(format!("records-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("t").join("owner")).unwrap();
        std::fs::write(dir.join("t/owner/run1.json"), r#"{"$locale": "en-GB", "date": "03/04/2026"}"#).unwrap();
        std::fs::write(dir.join("t/owner/run2.json"), r#"{"$locale": "en GB; x"}"#).unwrap();
        let store = RecordStore::new(dir.clone());
        assert_eq!(store.locale("t", "owner", "run1"), Ok(Some("en-GB".into())));
        assert_eq!(store.locale("t", "owner", "run2"), Ok(None), "not a language tag");
        assert_eq!(store.fields("t", "owner", "run1"), Ok(vec![("date".into(), "03/04/2026".into())]));
        assert!(matches!(store.value("t", "owner", "run1", LOCALE_KEY), Err(RecordError::NoField { .. })));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn key_code_points_are_not_typeable() {
        assert!(typeable("Ford Transit 350"));
        assert!(!typeable("a\u{e007}"), "WebDriver's Enter");
        assert!(!typeable("a\nb"));
    }
}
