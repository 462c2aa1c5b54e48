//! Why a grant does not cover an action: a stable code per reason, and the reason with a
//! detail for people.

use std::fmt;

use crate::consequence::Named;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    NamedConsequence(Named),
    Disabled,
    Unnamed,
    LabelTruncated,
    PageUnparseable,
    PageOutsideScope,
    PageSensitiveSegment,
    TargetOutsideScope,
    TargetSensitiveSegment,
    Download,
    FileInput,
    FieldKindNotCovered,
    KeyOnChoiceControl,
    KeyNotAllowed,
    OptionNotFound,
    TooManyOptions,
    TooManyChoices,
    NotRoutine,
    TextTooLong,
    ScrollNotAStep,
    TextControlCharacter,
    TextAddress,
    TextDigitRun,
    TextCredentialShaped,
    TextExceedsRemaining,
    FactsMissing,
}

impl Reason {
    /// Every reason but a named consequence's, for the list of codes.
    const PLAIN: [Self; 25] = [
        Self::Disabled,
        Self::Unnamed,
        Self::LabelTruncated,
        Self::PageUnparseable,
        Self::PageOutsideScope,
        Self::PageSensitiveSegment,
        Self::TargetOutsideScope,
        Self::TargetSensitiveSegment,
        Self::Download,
        Self::FileInput,
        Self::FieldKindNotCovered,
        Self::KeyOnChoiceControl,
        Self::KeyNotAllowed,
        Self::OptionNotFound,
        Self::TooManyOptions,
        Self::TooManyChoices,
        Self::NotRoutine,
        Self::TextTooLong,
        Self::ScrollNotAStep,
        Self::TextControlCharacter,
        Self::TextAddress,
        Self::TextDigitRun,
        Self::TextCredentialShaped,
        Self::TextExceedsRemaining,
        Self::FactsMissing,
    ];

    /// Every code a reason can have: the closed set a metric's label is drawn from.
    pub fn codes() -> impl Iterator<Item = &'static str> {
        Named::ALL.into_iter().map(Named::code).chain(Self::PLAIN.into_iter().map(Self::code))
    }

    /// The reason a stored code names.
    pub fn from_code(code: &str) -> Option<Self> {
        let named = Named::ALL.into_iter().map(Self::NamedConsequence);
        named.chain(Self::PLAIN).find(|r| r.code() == code)
    }

    /// What the owner reads for it: why a task permission does not cover the act.
    pub fn owner_words(self) -> &'static str {
        match self {
            Self::NamedConsequence(n) => n.owner_words(),
            Self::Download | Self::FileInput => "it uploads or downloads a file",
            Self::PageOutsideScope | Self::TargetOutsideScope => "it is outside the site area the permission covers",
            Self::PageSensitiveSegment | Self::TargetSensitiveSegment => {
                "it is on a part of the site kept for you alone"
            }
            Self::PageUnparseable => "the page's address could not be read",
            Self::Disabled => "the control is disabled",
            Self::Unnamed => "the control has no name to show you",
            Self::LabelTruncated | Self::FactsMissing | Self::TooManyOptions | Self::TooManyChoices => {
                "the page could not be read whole"
            }
            Self::FieldKindNotCovered => "the permission does not cover this kind of field",
            Self::KeyOnChoiceControl | Self::KeyNotAllowed => "the permission does not cover this key",
            Self::OptionNotFound => "the option is not in the list",
            Self::NotRoutine => "it is not a routine step",
            Self::TextTooLong | Self::TextExceedsRemaining => "the text is longer than the permission allows",
            Self::TextControlCharacter | Self::TextAddress | Self::TextDigitRun | Self::TextCredentialShaped => {
                "the text looks like an address, a number or a secret"
            }
            Self::ScrollNotAStep => "the scroll is not one of the fixed steps",
        }
    }

    /// The stable code. A named consequence reports the consequence's own code.
    pub fn code(self) -> &'static str {
        match self {
            Self::NamedConsequence(n) => n.code(),
            Self::Disabled => "element_disabled",
            Self::Unnamed => "element_unnamed",
            Self::LabelTruncated => "label_truncated",
            Self::PageUnparseable => "page_unparseable",
            Self::PageOutsideScope => "page_outside_scope",
            Self::PageSensitiveSegment => "page_sensitive_segment",
            Self::TargetOutsideScope => "target_outside_scope",
            Self::TargetSensitiveSegment => "target_sensitive_segment",
            Self::Download => "download",
            Self::FileInput => "file_input",
            Self::FieldKindNotCovered => "field_kind_not_covered",
            Self::KeyOnChoiceControl => "key_on_choice_control",
            Self::KeyNotAllowed => "key_not_allowed",
            Self::OptionNotFound => "option_not_found",
            Self::TooManyOptions => "too_many_options",
            Self::TooManyChoices => "too_many_choices",
            Self::NotRoutine => "not_routine",
            Self::TextTooLong => "text_too_long",
            Self::ScrollNotAStep => "scroll_not_a_step",
            Self::TextControlCharacter => "text_control_character",
            Self::TextAddress => "text_address",
            Self::TextDigitRun => "text_digit_run",
            Self::TextCredentialShaped => "text_credential_shaped",
            Self::TextExceedsRemaining => "text_exceeds_remaining",
            Self::FactsMissing => "facts_missing",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Why a grant does not cover an action: a stable reason and a human detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCovered {
    pub reason: Reason,
    pub detail: String,
}

impl fmt::Display for NotCovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.code(), self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    /// `PLAIN` lists every reason but a named consequence's, once each. The match has no wildcard
    /// and gives each reason a number of its own: a new reason does not compile until it has the
    /// next number, and then this fails until `PLAIN` lists it.
    #[test]
    fn every_reason_is_listed_once() {
        let number = |r: Reason| match r {
            Reason::NamedConsequence(_) => usize::MAX,
            Reason::Disabled => 0,
            Reason::Unnamed => 1,
            Reason::LabelTruncated => 2,
            Reason::PageUnparseable => 3,
            Reason::PageOutsideScope => 4,
            Reason::PageSensitiveSegment => 5,
            Reason::TargetOutsideScope => 6,
            Reason::TargetSensitiveSegment => 7,
            Reason::Download => 8,
            Reason::FileInput => 9,
            Reason::FieldKindNotCovered => 10,
            Reason::KeyOnChoiceControl => 11,
            Reason::KeyNotAllowed => 12,
            Reason::OptionNotFound => 13,
            Reason::TooManyOptions => 14,
            Reason::TooManyChoices => 15,
            Reason::NotRoutine => 16,
            Reason::TextTooLong => 17,
            Reason::ScrollNotAStep => 18,
            Reason::TextControlCharacter => 19,
            Reason::TextAddress => 20,
            Reason::TextDigitRun => 21,
            Reason::TextCredentialShaped => 22,
            Reason::TextExceedsRemaining => 23,
            Reason::FactsMissing => 24,
        };
        let mut listed: Vec<usize> = Reason::PLAIN.into_iter().map(number).collect();
        listed.sort_unstable();
        assert_eq!(listed, (0..25).collect::<Vec<_>>());
        let mut codes: Vec<&str> = Reason::codes().collect();
        let n = codes.len();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), n, "a code is spelt twice");
    }
}
