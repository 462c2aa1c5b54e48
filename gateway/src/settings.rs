//! The gateway's fixed names and bounds.

use std::time::Duration;

/// The session cookie's name: `__Host-` makes a browser keep it only if it is `Secure`, has no
/// `Domain` and has `Path=/`, so no other host and no plaintext page can set or read it.
pub const SESSION_COOKIE: &str = "__Host-gl_session";
/// The header a browser session's writes carry (its value from `GET /v1/me`).
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// A request not answered by then is answered 504 `outcome_unknown`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The authorizer's deadline, inside the request's with room for the owner lookup: a write the
/// authorizer did not finish in time is told apart from one the gateway gave up waiting for.
pub const GRPC_TIMEOUT: Duration = Duration::from_secs(6);
/// Reads of one replica that may wait for a view at once; past it they answer at once.
pub const MAX_VIEW_WAITS: usize = 32;
/// The longest a read waits for a view to reach the position it was given.
pub const VIEW_WAIT: Duration = Duration::from_secs(2);
/// An event stream ends after this; the client opens another (and is authenticated again).
pub const STREAM_LIFETIME: Duration = Duration::from_secs(10 * 60);
