//! The task grant's fixed limits. Code constants, never configuration: configuring them would
//! widen authority silently. Database CHECK constraints repeat them.

use time::Duration;

pub const GRANT_DURATION: Duration = Duration::minutes(30);
pub const MAX_ACTIONS: u32 = 200;
pub const MAX_TYPED_CHARS: u32 = 4_096;
/// How long an approval card waits for the owner.
pub const APPROVAL_TTL: Duration = Duration::minutes(10);
