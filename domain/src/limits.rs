//! The task grant's fixed limits. Code constants, never configuration: configuring them would
//! widen authority silently. Database CHECK constraints repeat them.

use time::Duration;

pub const GRANT_DURATION: Duration = Duration::minutes(30);
pub const MAX_ACTIONS: u32 = 200;
pub const MAX_TYPED_CHARS: u32 = 4_096;
/// How long an approval card waits for the owner.
pub const APPROVAL_TTL: Duration = Duration::minutes(10);

/// A tenant id's longest form, so that `category-tenant.id` fits a stream name (200 bytes).
pub const MAX_TENANT_LEN: usize = 64;
/// The longest session, profile, run, message or tool-call id a caller may send.
pub const MAX_ID_LEN: usize = 120;
