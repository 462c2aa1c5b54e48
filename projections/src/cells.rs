//! Rows as text: what `verify` compares and prints, the same from a table and from a replay.

use time::OffsetDateTime;

/// A row as text cells in column order: what `verify` compares and prints.
pub type Cells = Vec<String>;

/// Timestamps as both sides print them: RFC 3339 in UTC, to the microsecond.
pub(crate) fn text_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}
