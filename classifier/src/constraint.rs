//! The dispatch constraint the authorizer sends with every grant allow to the browser runtime. The runtime can
//! only narrow with it: a stale or forged constraint causes nothing worse than a refusal. The
//! grant kind fixes the consequence ceiling and the per-action text cap, and a constraint whose
//! fields disagree with its kind is invalid wherever it is read.

use std::fmt;

use time::OffsetDateTime;

use crate::text_shape::MAX_TEXT_PER_ACTION;

/// [`MAX_TEXT_PER_ACTION`] as the wire's `u32`.
#[allow(clippy::cast_possible_truncation)] // the assert proves it fits
const TASK_TEXT_CHARS: u32 = {
    assert!(MAX_TEXT_PER_ACTION <= u32::MAX as usize);
    MAX_TEXT_PER_ACTION as u32
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    Task,
    Standing,
}

impl GrantKind {
    /// The most a covered action may do under this kind.
    pub fn consequence_ceiling(self) -> &'static str {
        match self {
            Self::Task => "unknown",
            Self::Standing => "routine",
        }
    }

    /// Characters one action may type under this kind.
    pub fn max_text_chars(self) -> u32 {
        match self {
            Self::Task => TASK_TEXT_CHARS,
            Self::Standing => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchConstraint {
    pub kind: GrantKind,
    pub origins: Vec<String>,
    pub path_prefix: String,
    pub not_after: OffsetDateTime,
    pub consequence_ceiling: String,
    pub max_text_chars: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidConstraint(pub &'static str);

impl fmt::Display for InvalidConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid dispatch constraint: {}", self.0)
    }
}

impl std::error::Error for InvalidConstraint {}

impl DispatchConstraint {
    /// Refuses a constraint whose ceiling or text cap disagrees with its kind, or that names no
    /// origin, a non-HTTPS origin, or a prefix that is not one segment (`/` for standing).
    pub fn validate(&self) -> Result<(), InvalidConstraint> {
        if self.consequence_ceiling != self.kind.consequence_ceiling() {
            return Err(InvalidConstraint("consequence ceiling disagrees with the grant kind"));
        }
        if self.max_text_chars != self.kind.max_text_chars() {
            return Err(InvalidConstraint("text cap disagrees with the grant kind"));
        }
        if self.origins.is_empty() || self.origins.iter().any(|o| !o.starts_with("https://")) {
            return Err(InvalidConstraint("origins must be https"));
        }
        let one_segment =
            self.path_prefix.starts_with('/') && self.path_prefix.len() > 1 && !self.path_prefix[1..].contains('/');
        match self.kind {
            GrantKind::Task if !one_segment => Err(InvalidConstraint("a task grant's prefix is one path segment")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> DispatchConstraint {
        DispatchConstraint {
            kind: GrantKind::Task,
            origins: vec!["https://www.example.org".into()],
            path_prefix: "/lesson".into(),
            not_after: OffsetDateTime::UNIX_EPOCH,
            consequence_ceiling: "unknown".into(),
            max_text_chars: 256,
        }
    }

    #[test]
    fn the_kind_fixes_ceiling_and_cap() {
        assert_eq!(task().validate(), Ok(()));
        let wider = DispatchConstraint { consequence_ceiling: "payment".into(), ..task() };
        assert!(wider.validate().is_err());
        let more_text = DispatchConstraint { max_text_chars: 4096, ..task() };
        assert!(more_text.validate().is_err());
        let standing_with_text =
            DispatchConstraint { kind: GrantKind::Standing, consequence_ceiling: "routine".into(), ..task() };
        assert!(standing_with_text.validate().is_err(), "a standing grant types nothing");
        assert!(DispatchConstraint { origins: vec![], ..task() }.validate().is_err());
        assert!(DispatchConstraint { origins: vec!["http://x.example".into()], ..task() }.validate().is_err());
        assert!(DispatchConstraint { path_prefix: "/a/b".into(), ..task() }.validate().is_err());
    }
}
