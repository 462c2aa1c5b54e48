//! The dispatch constraint the authorizer sends with every grant allow to the browser runtime. The runtime can
//! only narrow with it: a stale or forged constraint causes nothing worse than a refusal. The
//! grant kind fixes the consequence ceiling and the per-action text cap, so the constraint holds
//! only its kind; a wire constraint whose ceiling or cap disagrees with its kind is refused where
//! it is read ([`DispatchConstraint::from_wire`]).

use std::fmt;

use time::OffsetDateTime;

use crate::consequence::Consequence;
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
    /// The most a covered action may do under this kind, as the wire spells it.
    pub fn consequence_ceiling(self) -> &'static str {
        match self {
            Self::Task => Consequence::Unknown.code(),
            Self::Standing => Consequence::Routine.code(),
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidConstraint(pub &'static str);

impl fmt::Display for InvalidConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid dispatch constraint: {}", self.0)
    }
}

impl std::error::Error for InvalidConstraint {}

/// A constraint as the wire carries it: the kind's ceiling and text cap spelt out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireConstraint {
    pub kind: GrantKind,
    pub origins: Vec<String>,
    pub path_prefix: String,
    pub not_after: OffsetDateTime,
    pub consequence_ceiling: String,
    pub max_text_chars: u32,
}

impl DispatchConstraint {
    /// The most a covered action may do under it: its kind's.
    pub fn consequence_ceiling(&self) -> &'static str {
        self.kind.consequence_ceiling()
    }

    /// Characters one action may type under it: its kind's.
    pub fn max_text_chars(&self) -> u32 {
        self.kind.max_text_chars()
    }

    /// A constraint read from the wire: refused when its ceiling or text cap disagrees with its
    /// kind, or when it breaks [`DispatchConstraint::validate`].
    pub fn from_wire(w: WireConstraint) -> Result<Self, InvalidConstraint> {
        if w.consequence_ceiling != w.kind.consequence_ceiling() {
            return Err(InvalidConstraint("consequence ceiling disagrees with the grant kind"));
        }
        if w.max_text_chars != w.kind.max_text_chars() {
            return Err(InvalidConstraint("text cap disagrees with the grant kind"));
        }
        let c = Self { kind: w.kind, origins: w.origins, path_prefix: w.path_prefix, not_after: w.not_after };
        c.validate()?;
        Ok(c)
    }

    /// Refuses a constraint that names no origin, a non-HTTPS origin, or a prefix that is not
    /// one segment (`/` for standing).
    pub fn validate(&self) -> Result<(), InvalidConstraint> {
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

    fn task() -> WireConstraint {
        WireConstraint {
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
        let read = DispatchConstraint::from_wire(task()).expect("a task constraint as sealed");
        assert_eq!((read.consequence_ceiling(), read.max_text_chars()), ("unknown", 256));
        let wider = WireConstraint { consequence_ceiling: "payment".into(), ..task() };
        assert!(DispatchConstraint::from_wire(wider).is_err());
        let more_text = WireConstraint { max_text_chars: 4096, ..task() };
        assert!(DispatchConstraint::from_wire(more_text).is_err());
        let standing_with_text =
            WireConstraint { kind: GrantKind::Standing, consequence_ceiling: "routine".into(), ..task() };
        assert!(DispatchConstraint::from_wire(standing_with_text).is_err(), "a standing grant types nothing");
        let standing = WireConstraint {
            kind: GrantKind::Standing,
            consequence_ceiling: "routine".into(),
            max_text_chars: 0,
            path_prefix: "/".into(),
            ..task()
        };
        assert!(DispatchConstraint::from_wire(standing).is_ok());
        assert!(DispatchConstraint::from_wire(WireConstraint { origins: vec![], ..task() }).is_err());
        let http = WireConstraint { origins: vec!["http://x.example".into()], ..task() };
        assert!(DispatchConstraint::from_wire(http).is_err());
        assert!(DispatchConstraint::from_wire(WireConstraint { path_prefix: "/a/b".into(), ..task() }).is_err());
    }
}
