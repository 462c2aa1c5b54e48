//! The ids a worker carries between the runtime and the authorizer, one format each: a
//! snapshot's id, a node's ref, an approve-once token and a task-record field id. The harness's
//! tool schemas, the runtime's and the authorizer's request checks, and any other front end
//! (an MCP server) take the pattern and the check from here, so an id one accepts the others do.

/// A task-record field id, the one rule both services hold a type's `field_id` to.
pub const MAX_FIELD_ID_LEN: usize = 120;

/// The one rule for a record field's id: checked by the runtime (at the request and again at the
/// read) and by the authorizer (a type's `action.field_id`), so an id one takes the other takes.
pub fn check_field_id(field: &str) -> Result<(), String> {
    Id::FieldId.check(field)
}

/// An approve-once token: `apv_` and 24 lowercase hex digits, the one spelling both services
/// check against.
pub const APPROVAL_TOKEN_PREFIX: &str = "apv_";
pub const APPROVAL_TOKEN_HEX: usize = 24;
pub const APPROVAL_TOKEN_LEN: usize = APPROVAL_TOKEN_PREFIX.len() + APPROVAL_TOKEN_HEX;

/// A new approval token from 96 random bits.
pub fn approval_token(random: [u8; APPROVAL_TOKEN_HEX / 2]) -> String {
    format!("{APPROVAL_TOKEN_PREFIX}{}", hex::encode(random))
}

/// Whether `token` is an approval token's shape.
pub fn is_approval_token(token: &str) -> bool {
    Id::ApprovalToken.holds(token)
}

/// One kind of id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    /// `snap_` and 12 lowercase hex digits: one observation of one page.
    SnapshotId,
    /// `n` and 1–4 digits: a node, only within its snapshot.
    Ref,
    /// `apv_` and 24 lowercase hex digits: one approved act, once.
    ApprovalToken,
    /// Any text of 1–120 bytes without a control character: a task-record field.
    FieldId,
}

impl Id {
    pub const ALL: [Id; 4] = [Id::SnapshotId, Id::Ref, Id::ApprovalToken, Id::FieldId];

    /// The ECMAScript pattern a JSON Schema states it with.
    pub const fn pattern(self) -> &'static str {
        match self {
            Id::SnapshotId => "^snap_[0-9a-f]{12}$",
            Id::Ref => "^n[0-9]{1,4}$",
            Id::ApprovalToken => "^apv_[0-9a-f]{24}$",
            Id::FieldId => "^[^\\u0000-\\u001f\\u007f-\\u009f]{1,120}$",
        }
    }

    /// What a well-formed one is, for refusals.
    pub const fn says(self) -> &'static str {
        match self {
            Id::SnapshotId => "snap_ and 12 lowercase hex digits",
            Id::Ref => "n and 1-4 digits",
            Id::ApprovalToken => "apv_ and 24 lowercase hex digits",
            Id::FieldId => "1-120 bytes without control characters",
        }
    }

    /// Whether `s` is one.
    pub fn holds(self, s: &str) -> bool {
        let hex = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
        let run = |prefix: &str, class: fn(u8) -> bool, lengths: std::ops::RangeInclusive<usize>| {
            s.strip_prefix(prefix).is_some_and(|rest| lengths.contains(&rest.len()) && rest.bytes().all(class))
        };
        match self {
            Id::SnapshotId => run("snap_", hex, 12..=12),
            Id::Ref => run("n", |b| b.is_ascii_digit(), 1..=4),
            Id::ApprovalToken => run(APPROVAL_TOKEN_PREFIX, hex, APPROVAL_TOKEN_HEX..=APPROVAL_TOKEN_HEX),
            Id::FieldId => !s.is_empty() && s.len() <= MAX_FIELD_ID_LEN && !s.chars().any(char::is_control),
        }
    }

    /// `s` if it is one; otherwise why not, in words.
    pub fn check(self, s: &str) -> Result<(), String> {
        if self.holds(s) { Ok(()) } else { Err(format!("is {}", self.says())) }
    }
}

#[cfg(test)]
mod tests {
    use super::Id;

    #[test]
    fn each_id_takes_its_own_and_refuses_the_rest() {
        let cases: [(Id, &[&str], &[&str]); 4] = [
            (Id::SnapshotId, &["snap_0123456789ab"], &["snap_0123456789AB", "snap_0123", "snap_0123456789abc", ""]),
            (Id::Ref, &["n1", "n9999"], &["n", "n12345", "m1", "n1a", ""]),
            (Id::ApprovalToken, &["apv_0123456789abcdef01234567"], &["apv_0123", "apv_0123456789abcdef0123456g"]),
            (
                Id::FieldId,
                &["answer", "first name", "billing/zip", "Straße", "q[1]"],
                &["", "a\nb", "a\0b", "a\u{85}b"],
            ),
        ];
        for (id, good, bad) in cases {
            for s in good {
                assert!(id.holds(s), "{id:?} {s:?}");
            }
            for s in bad {
                assert!(id.check(s).is_err(), "{id:?} {s:?}");
            }
        }
        assert!(!Id::FieldId.holds(&"x".repeat(121)));
    }
}
