//! The task grant's fixed limits. Code constants, never configuration: configuring them would
//! widen authority silently. Database CHECK constraints repeat them.

use time::Duration;

/// How long a task grant lasts, in the minutes an approval card's offer states.
pub const GRANT_MINUTES: u32 = 30;
pub const GRANT_DURATION: Duration = Duration::minutes(GRANT_MINUTES as i64);
pub const MAX_ACTIONS: u32 = 200;
pub const MAX_TYPED_CHARS: u32 = 4_096;
/// How long a worker holds a task without renewing it: a worker that dies loses its task to
/// another this long after its last renewal.
pub const TASK_LEASE: Duration = Duration::seconds(60);
/// How long an approval card waits for the owner.
pub const APPROVAL_TTL: Duration = Duration::minutes(10);

/// A tenant id's longest form, and the longest session, profile, run, message or tool-call id a
/// caller may send: the ledger's, so that `category-tenant.id` fits a stream name.
pub use ledger::{MAX_ENTITY_ID_LEN as MAX_ID_LEN, MAX_TENANT_LEN};
