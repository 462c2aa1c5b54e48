//! Logs: JSON lines (with the current span's fields, so each line carries the ids of the request
//! it belongs to) when standard error is not a terminal, human text when it is.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the process's subscriber: RUST_LOG when set, otherwise `info`.
pub fn init_logs() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().with_current_span(true).with_span_list(true).flatten_event(true).init();
    }
}
