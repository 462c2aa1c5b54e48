//! What a PostgreSQL failure means for a write: refused, unavailable, or possibly committed.

use tokio_postgres::error::SqlState;

use crate::envelope::AppendRequest;
use crate::error::{AppendError, ReadError};

/// An error with its sources: tokio-postgres alone renders a server error as "db error".
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub(super) fn unavailable_read(e: impl std::error::Error) -> ReadError {
    ReadError::Unavailable(chain(&e))
}

pub(super) fn unavailable(e: impl std::error::Error) -> AppendError {
    AppendError::Unavailable(chain(&e))
}

/// Maps the INSERT's unique violations to typed errors by constraint name: the stream key means
/// a concurrent writer took the version first; the event id key means the id is already stored.
pub(super) fn insert_error(e: &tokio_postgres::Error, request: &AppendRequest) -> AppendError {
    if session_ended(e) {
        return AppendError::Indeterminate { reason: chain(e), backend_pid: None, event_ids: request.event_ids() };
    }
    let Some(db) = e.as_db_error() else { return unavailable(e) };
    if *db.code() == SqlState::T_R_DEADLOCK_DETECTED {
        let s = &request.streams[0];
        return AppendError::Conflict { stream: s.stream_id.clone(), expected: s.expected, actual: None };
    }
    if *db.code() != SqlState::UNIQUE_VIOLATION {
        return unavailable(e);
    }
    let detail = db.detail().unwrap_or_default();
    match db.constraint() {
        Some("events_stream_version_key") => {
            let s = request
                .streams
                .iter()
                .find(|s| detail.contains(&format!("=({}, ", s.stream_id)))
                .unwrap_or(&request.streams[0]);
            AppendError::Conflict { stream: s.stream_id.clone(), expected: s.expected, actual: None }
        }
        Some("events_event_id_key") => {
            let ids = request.event_ids();
            let event_id = ids.iter().copied().find(|id| detail.contains(&id.to_string())).unwrap_or(ids[0]);
            AppendError::DuplicateEventId { event_id }
        }
        _ => unavailable(e),
    }
}

/// An append failure after which the connection may be dead: kept out of the pool. A conflict or
/// a refused input leaves it healthy, and reconnecting is far dearer than reusing it.
pub(super) fn connection_suspect(e: &AppendError) -> bool {
    matches!(e, AppendError::Unavailable(_) | AppendError::Indeterminate { .. })
}

/// A lost connection, or a server error that ends the session (FATAL, operator intervention
/// `57P…`, connection exception `08…`): what the statement did may have been committed before
/// it ended. A cancelled statement (`57014`) was not, and its session lives on.
pub(super) fn session_ended(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            matches!(
                db.parsed_severity(),
                Some(tokio_postgres::error::Severity::Fatal | tokio_postgres::error::Severity::Panic)
            ) || code.starts_with("57P")
                || code.starts_with("08")
        }
        // Without a server error the client cannot always tell a lost connection from a local
        // failure: taken as possibly committed, which costs a settle, never a wrong answer.
        None => true,
    }
}
